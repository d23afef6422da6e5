// Merges the split partials of the decode kernel: one warp per output row (b, query head, new token).
// Only the splits that hold tokens of the row's sequence are read (a split past kv_len writes nothing),
// and the tail slot when there is one (DecodeCombineParams);
// a split whose tokens the row may not see (causal) carries log2-sum -inf and weighs 0.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"

namespace qattn::decode {

template <Fmt OUT, int D>
struct Combine {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kPerLane = D / 32;

  static __device__ void run(const DecodeCombineParams& p) {
    const int lane = threadIdx.x % 32;
    const long long row = (long long)blockIdx.x * kWarps + threadIdx.x / 32;   // (b, hq, i) flattened
    if (row >= (long long)p.batch * p.heads_q * p.q_len) return;
    const int b = int(row / ((long long)p.heads_q * p.q_len));
    const int hq = int(row / p.q_len % p.heads_q), i = int(row % p.q_len);
    const int len = p.kv_lens[b];
    const int head = p.splits - p.tail_slot;
    const int used = min(head, (len + p.split_tokens - 1) / p.split_tokens);
    const float* lse = p.part_lse + row * p.splits;
    // Slot s of the i-th slot read: the first `used`, then the tail slot.
    auto slot = [&](int i) { return i < used ? i : head; };
    const int n = used + p.tail_slot;
    float m = dev::neg_inf();
    for (int i = 0; i < n; ++i) m = fmaxf(m, lse[slot(i)]);
    float acc[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) acc[k] = 0.f;
    float sum = 0.f;
    if (m != dev::neg_inf())
      for (int i = 0; i < n; ++i) {
        const float w = dev::exp2_approx(lse[slot(i)] - m);
        sum += w;
        const float* po = p.part_o + (row * p.splits + slot(i)) * D;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) acc[k] += w * po[lane + 32 * k];
      }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    dev::u16* o = static_cast<dev::u16*>(p.o.ptr) + (long long)b * p.o.sb + (long long)hq * p.o.sh + (long long)i * p.o.ss;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) o[lane + 32 * k] = dev::from_float<OUT>(acc[k] * inv);
    if (lane == 0 && p.lse != nullptr) p.lse[row] = sum > 0.f ? (m + dev::log2_approx(sum)) * dev::kLn2 : dev::neg_inf();
  }
};

}  // namespace qattn::decode
