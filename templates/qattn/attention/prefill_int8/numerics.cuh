// Numeric constants of the prefill kernel's softmax (P's scale per format, the overflow guards, the
// reference max's headroom); docs/design/prefill-kernels.md derives them.
#pragma once

#include "qattn/common/common.cuh"

namespace qattn {
namespace prefill_int8 {

// Slightly under 255 so that fp32 rounding near L = R can never produce 256 (a wrapped byte).
constexpr float kPScale = 254.51f;
constexpr float kLog2PScale = 7.9915785f;   // log2(kPScale)
constexpr dev::u32 kLRescale = 1u << 21;    // a thread's share of Σ P̂ above this halves O and l
// The same guard on the exact sum's share (kernels that keep no Σ P̂). round(y) <= 2y for every y >= 0
// and the fp16 pair sums err by under 1%, so a share of the exact sum under 15/16 · 2^21 keeps Σ P̂'s
// under 1.9 · 2^21.
constexpr float kLxRescale = static_cast<float>(kLRescale) * (15.f / 16.f);
// Least distance (log2 units) from a raised R down to the max that raised it: more headroom, fewer
// rescales, coarser P̂. 0 by default: a headroom buys fewer rescales with more error on un-smoothed V,
// and 1.0 fails the cos >= 0.999 bound there.
#ifndef QATTN_INT8_HEADROOM
#define QATTN_INT8_HEADROOM 0.0f
#endif
constexpr float kHeadroom = QATTN_INT8_HEADROOM;

// pv=fp8e4m3: P̃ = kFp8PScale · 2^(L - R) uses the whole e4m3 range (max 448); the 1/448 cancels against
// the same factor in the row sum l.
constexpr float kFp8PScale = 448.f;
constexpr float kLog2Fp8PScale = 8.80735492f;   // log2(448)
// accum=fp16: a row's share of Σ P per thread above this raises R by one step (halves O and l), so the
// half2 O stays below (4 · kHalfLShare + bn) · max|V| <= 256 · max|V| (fp16 overflows at 65504).
constexpr float kHalfLShare = 32.f;

template <bool B, class T, class F> struct Pick { using type = T; };
template <class T, class F> struct Pick<false, T, F> { using type = F; };

}  // namespace prefill_int8
}  // namespace qattn
