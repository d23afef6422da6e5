// Source -> cubin, through the SQLite binary cache when there is one: a cache hit costs a lookup and
// a digest check, a miss costs NVRTC (many sources compile in parallel) and then one short write.
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include "cache/layered_store.hpp"
#include "generator/render.hpp"

namespace qattn::rt {

struct Binary {
  std::string kernel_name;
  std::vector<unsigned char> cubin;
  std::string ptx, log;
  int registers = -1, spill_bytes = -1, smem_bytes = 0;
  bool wgmma_serialized = false;   // fresh compiles only (see rt::KernelUsage)
  double compile_ms = 0;
  bool from_cache = false;
  std::string error;   // non-empty: compilation failed (the NVRTC log or the exception)
  std::string key;     // binary-cache key
};

class BinaryProvider {
 public:
  BinaryProvider(cache::LayeredStore* store, bool writable) : store_(store), writable_(writable) {}
  // One binary per source, in order; never throws for a single failed compile (see Binary::error).
  // want_ptx bypasses the cache (PTX is not stored).
  std::vector<Binary> get(const std::vector<gen::Source>& sources, bool want_ptx = false);
  long long compiles() const { return compiles_; }
  long long cache_hits() const { return cache_hits_; }

 private:
  cache::LayeredStore* store_;   // may be null (cache disabled); reads both layers, writes the user one
  bool writable_;
  std::atomic<long long> compiles_{0}, cache_hits_{0};
};

}  // namespace qattn::rt
