// Decode timing on the GPU, for the tuner's dataflow and split-K sweeps (tuner/inflection): a KV cache
// of the spec's format filled with random tokens through append_kv (K with biased channels, as real K
// has; never zeros), random queries, and CUDA-event timings of the runtime's decode over enough cache copies
// that no launch finds its cache in L2.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/registry/runtime_impl.hpp"

namespace qattn::rt {

class DecodeTimingBench {
 public:
  explicit DecodeTimingBench(Runtime::Impl& runtime);
  ~DecodeTimingBench();
  DecodeTimingBench(const DecodeTimingBench&) = delete;
  DecodeTimingBench& operator=(const DecodeTimingBench&) = delete;

  // One sample per timed launch, microseconds (warm-up launches excluded). `tiling` block_m 0 and
  // `splits` 0 leave the choice to the runtime. Every sequence holds problem.kv_len tokens. Row-cache
  // formats only: a flashq spec is refused (bad_input; its cache is built by flashq_prefill).
  std::vector<double> samples_us(const Spec& spec, const Tiling& tiling, const Problem& problem, int splits,
                                 const TimingOptions& timing);

 private:
  struct Caches;
  Caches& caches_for(const Spec& spec, const Problem& problem, int copies);
  Runtime::Impl& rt_;
  std::unique_ptr<Caches> caches_;   // one set at a time: a sweep visits one cache shape after another
};

}  // namespace qattn::rt
