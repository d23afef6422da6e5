// The GPU attention suites' shared pieces: the lengths and layouts every form is checked on, one call
// into a NaN-poisoned output, and a bit-level comparison of two outputs. Header-only: the GPU tests link
// the runtime.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/random_data.hpp"

namespace qattn::test {

struct Case {
  int batch, heads_kv, q_len, kv_len;
  Layout layout;
};

// Lengths that hit every edge: a single row, tails shorter than a tile, one past a tile, long and odd,
// and q_len != kv_len (in both directions) for the bottom-right causal alignment.
inline const Case kCases[] = {
    {1, 2, 1, 1, Layout::bshd},      {2, 2, 17, 17, Layout::bhsd},   {1, 2, 63, 63, Layout::bshd},
    {1, 2, 65, 65, Layout::bhsd},    {1, 2, 1000, 1000, Layout::bshd}, {1, 1, 4097, 4097, Layout::bhsd},
    {1, 2, 65, 1000, Layout::bshd},  {1, 2, 1000, 65, Layout::bhsd}, {1, 2, 17, 4097, Layout::bshd},
    {2, 1, 1, 333, Layout::bhsd},
};

// One call on uploaded q, k, v into a NaN-poisoned output shaped like ref (lse: also poisoned by the
// caller, or null); returns the decoded output.
inline HostTensor run_poisoned(Runtime& runtime, AttentionCall call, const HostTensor& ref, const std::optional<Tiling>& form,
                        rt::Stream& stream) {
  const Fmt io = call.spec.out;
  std::vector<std::uint16_t> poison(static_cast<size_t>(test::storage_size(ref.shape, ref.strides)));
  test::fill_nan(poison, io);
  rt::DeviceBuffer dout = rt::DeviceBuffer::from(poison);
  call.o = view_of(dout, ref);
  if (form) {
    const auto prepared = runtime.prepare_with(call, *form, stream.get());
    runtime.run(*prepared, call.o, 0.f, call.lse, stream.get());
  } else {
    runtime.attention(call, stream.get());
  }
  stream.synchronize();
  return test::decode(dout.to_vector<std::uint16_t>().data(), ref.shape, ref.strides, io);
}

// How many values of two outputs of the same shape differ (bit-level equality of the decoded values).
inline size_t values_differ(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.data.size(), b.data.size());
  size_t differ = 0;
  for (size_t j = 0; j < a.data.size() && j < b.data.size(); ++j) differ += !(a.data[j] == b.data[j]);
  return differ;
}

}  // namespace qattn::test
