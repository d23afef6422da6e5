// A device KV cache (contiguous, or paged over scattered pages) whose first `tokens` rows of every
// sequence hold random K-like and V-like tokens, appended by the runtime: the state a decode step starts
// from. Shared by the decode GPU tests of this folder.
#pragma once
#include <cstdint>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/kv_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn::test {

// `rows` tokens of d values of type io, as their bits (k_like: K's channel bias, else Q/V-like outliers).
inline std::vector<std::uint16_t> random_bits(size_t rows, int d, Fmt io, std::uint64_t seed, bool k_like_data) {
  HostTensor t = random_tensor({1, 1, static_cast<int>(rows), d}, Layout::bhsd, k_like_data ? k_like() : q_like(), seed);
  round_to(t, io);
  return encode(t, io);
}

struct FilledCache {
  rt::DeviceBuffer k, v, table;
  KvCacheView view;
};

// page_size 0: contiguous, capacity tokens per sequence; else capacity / page_size pages per sequence.
inline FilledCache filled_cache(Runtime& runtime, const Spec& spec, int batch, int heads_kv, int capacity, int page_size,
                                int tokens, std::uint64_t seed) {
  const int d = spec.head_dim;
  HostKvCache layout = page_size ? make_paged(spec.qk.fmt, spec.qk.gran, d, batch, heads_kv, page_size, capacity / page_size, seed)
                                 : make_contiguous(spec.qk.fmt, spec.qk.gran, d, batch, heads_kv, capacity);
  FilledCache c;
  c.k = rt::DeviceBuffer::from(layout.bytes);
  c.v = rt::DeviceBuffer::from(layout.bytes);
  c.table = rt::DeviceBuffer::from(page_size ? layout.block_table : std::vector<int>{0});
  KvCacheView& view = c.view;
  view.k = c.k.as<void>();
  view.v = c.v.as<void>();
  view.head_stride = layout.head_stride;
  view.page_stride = layout.page_stride;
  if (page_size) {
    view.page_size = page_size;
    view.block_table = c.table.as<int>();
    view.table_stride = layout.table_stride;
  } else {
    view.capacity = capacity;
  }
  const size_t rows = static_cast<size_t>(batch) * heads_kv * tokens;
  rt::DeviceBuffer k = rt::DeviceBuffer::from(random_bits(rows, d, spec.out, seed, true));
  rt::DeviceBuffer v = rt::DeviceBuffer::from(random_bits(rows, d, spec.out, seed + 1, false));
  rt::DeviceBuffer zero = rt::DeviceBuffer::from(std::vector<int>(static_cast<size_t>(batch), 0));
  AppendKvCall fill;
  fill.spec = spec;
  fill.batch = batch;
  fill.heads_kv = heads_kv;
  fill.n_new = tokens;
  fill.k = k.as<void>();
  fill.v = v.as<void>();
  fill.cache = view;
  fill.start = zero.as<int>();
  runtime.append_kv(fill, nullptr);
  rt::synchronize_device(0);
  return c;
}

}  // namespace qattn::test
