// Whole-head channel statistics for the quantizers, and the one-pass form that needs no statistics pass.
//
// ChannelPartials: a thread's running per-channel sum (and max/min) over its rows, folded across the
//   block's row groups in shared memory. ChannelStats (two-pass plans) writes the folds per chunk;
//   the one-pass quantizers add them into per-head totals.
//
// One pass (QuantizeRows / QuantizeTransposed with OnePass): the K/V smoothing mean and the per_channel
// V scales are statistics of a whole head, so a plain plan reads the input twice (ChannelStats, then the
// quantizer). Here every block keeps its tile in registers (the quantizers do anyway), adds the tile's
// per-channel sums (float64) and max/min (order-preserving integer keys, atomicMax) to its head's
// totals, arrives on the head's counter and waits until every tile of the head has arrived. Then each
// block reads the same totals, computes the same mean and scales from them, and quantizes its tile from
// registers: the input is read once. The block of tile 0 stores the mean and scales for the attention
// kernel (QuantParams::mean, per_channel scales), exactly as FinalizeStats would.
//
// Forward progress: blocks take their (head, tile) from a ticket counter in the order they start, so
// when a block waits, every tile of every earlier head has started, and those finish without waiting
// for anything later. The plan uses this form only when one head's tiles are at most half of the blocks
// the GPU holds at once (QuantProblem::resident_blocks; the passes are launched with a minimum of
// kOnePassMinBlocks per SM), so a head's tiles are resident together and the next head's loads overlap
// the wait.
//
// On the H100 this form is slower per operand than the statistics pass plus the quantizer
// (qattn_bench_quant), because waiting blocks hold slots that loads need; the
// runtime takes this form with RuntimeOptions::quant_one_pass, and for calls whose tiles all fit one
// wave of the GPU (rt::one_pass_fits), where the statistics pass would be a launch of its own.
//
// Determinism: a tile's partials are fp32 sums in a fixed order. Their float64 total is the same in any
// arrival order while it is exact (partials within 2^29 of one another in magnitude); max and min are
// exact. The statistics equal the two-pass plan's up to fp32 summation order.
//
// Scratch (QuantParams::amax_scratch, 32-bit words, all zero before the launch):
//   [0] ticket; head (b, h) at kSyncOffset + (b*heads + h) * sync_head_words(D):
//   [0] arrived tiles, [4, 4 + 2D) sums as D float64, [4 + 2D, 4 + 3D) max keys, [4 + 3D, 4 + 4D) min keys.
// A key of 0 means "no value yet", so a zeroed buffer is the empty state of every field.
// Variable-length input (QuantParams::cu_seqlens): the tiles of a head are still seq_pad's, the tiles
// past sequence b's length add nothing, and its mean divides by its own length.
#pragma once

#include "qattn/quant/quant_device.cuh"

namespace qattn {
namespace quant {

__device__ __forceinline__ unsigned atomic_add_u32(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void red_release_add_u32(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_add_f64(double* p, double v) {
  asm volatile("red.global.add.f64 [%0], %1;" ::"l"(p), "d"(v) : "memory");
}
__device__ __forceinline__ void red_max_u32(unsigned* p, unsigned v) {
  asm volatile("red.global.max.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Loads at the point of coherence (L2): the totals were written by other SMs during this launch.
__device__ __forceinline__ double ld_cg_f64(const double* p) {
  double v;
  asm volatile("ld.global.cg.f64 %0, [%1];" : "=d"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_cg_u32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Float -> unsigned key with the same order (finite values): positives above 2^31, negatives below,
// 0 below every float. The min is kept as the max of the complemented key.
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// FinalizeStats' rule for a channel's abs-max around `center` (its mean, or 0): max(max - c, c - min),
// the same fp32 value as the largest |x - c| the quantizer computes (fp32 subtraction is monotonic).
__device__ __forceinline__ float centred_amax(float hi, float lo, float center) {
  return fmaxf(fmaxf(hi - center, center - lo), 0.f);   // an empty channel (hi = -inf) gives 0
}

template <Fmt In, int D, bool MinMax>
struct ChannelPartials {
  static constexpr int kLanesPerRow = lanes_per_row(D);
  static constexpr int kVecPerRow = D / kVecElems;
  static constexpr int kGroups = kThreads / kLanesPerRow;   // row groups of a block
  static constexpr int kStats = MinMax ? 3 : 1;
  static constexpr int kSmemFloats = kStats * kGroups * D;

  float sum[kVecElems], hi[kVecElems], lo[kVecElems];

  __device__ __forceinline__ ChannelPartials() {
    const float inf = __int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) sum[i] = 0.f, hi[i] = -inf, lo[i] = inf;
  }
  __device__ __forceinline__ void add(const Vec8& x) {
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) {
      sum[i] += x.v[i];
      if (MinMax) hi[i] = fmaxf(hi[i], x.v[i]), lo[i] = fminf(lo[i], x.v[i]);
    }
  }
  // Folds the row groups of the block (fixed order) and calls f(c, sum, max, min) once per channel.
  // Block-wide: every thread calls it. `part`: kSmemFloats of shared memory.
  template <class F>
  __device__ __forceinline__ void fold(float* part, F&& f) const {
    const int group = threadIdx.x / kLanesPerRow, c0 = (threadIdx.x % kLanesPerRow) * kVecElems;
    if (kLanesPerRow == kVecPerRow || c0 < D) {   // idle lanes (d = 96) hold nothing
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        part[group * D + c0 + i] = sum[i];
        if (MinMax) {
          part[(kGroups + group) * D + c0 + i] = hi[i];
          part[(2 * kGroups + group) * D + c0 + i] = lo[i];
        }
      }
    }
    __syncthreads();
    const float inf = __int_as_float(0x7f800000);
    for (int c = threadIdx.x; c < D; c += kThreads) {
      float s = 0.f, mx = -inf, mn = inf;
      for (int g = 0; g < kGroups; ++g) {
        s += part[g * D + c];
        if (MinMax) mx = fmaxf(mx, part[(kGroups + g) * D + c]), mn = fminf(mn, part[(2 * kGroups + g) * D + c]);
      }
      f(c, s, mx, mn);
    }
  }
};

// The one-pass protocol. Tiles: the head's tile count (the grid is tiles * heads * batch blocks).
template <int D, bool MinMax>
struct HeadSync {
  struct Coord {
    int b, h, tile;
  };
  static __device__ __forceinline__ unsigned* words(const QuantParams& p) {
    return reinterpret_cast<unsigned*>(p.amax_scratch);
  }
  static __device__ __forceinline__ unsigned* head(const QuantParams& p, int b, int h) {
    return words(p) + kSyncOffset + (static_cast<long long>(b) * p.heads + h) * sync_head_words(D);
  }

  // This block's (b, h, tile), in start order. `slot`: one shared int.
  static __device__ Coord take_ticket(const QuantParams& p, int tiles, int* slot) {
    if (threadIdx.x == 0) *slot = static_cast<int>(atomic_add_u32(words(p), 1u));
    __syncthreads();
    const int t = *slot;
    return Coord{t / tiles / p.heads, t / tiles % p.heads, t % tiles};
  }

  // Adds one channel's tile partials to the head's totals (one thread per channel).
  static __device__ __forceinline__ void contribute(const QuantParams& p, const Coord& at, int c, float sum, float mx,
                                                    float mn) {
    unsigned* w = head(p, at.b, at.h);
    red_add_f64(reinterpret_cast<double*>(w + 4) + c, static_cast<double>(sum));
    if (MinMax) {
      red_max_u32(w + 4 + 2 * D + c, order_key(mx));
      red_max_u32(w + 4 + 3 * D + c, ~order_key(mn));
    }
  }

  // After every thread's contribute(): publish this tile, then wait for the head's other tiles.
  // The barrier orders the block's atomics before thread 0's fence, which (cumulative) publishes them
  // all with the release of the arrival.
  static __device__ void arrive_and_wait(const QuantParams& p, const Coord& at, int tiles) {
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* arrived = head(p, at.b, at.h);
      __threadfence();
      red_release_add_u32(arrived, 1u);
      while (ld_acquire_u32(arrived) < static_cast<unsigned>(tiles)) asm volatile("nanosleep.u32 64;");
    }
    __syncthreads();
  }

  // The head's totals, after arrive_and_wait(): tot[c] = channel c's mean over the sequence's tokens
  // (seq_len_of: seq_len, or its own length with variable-length input; 0 for an empty one) and, with
  // MinMax, tot[D + c] = its max and tot[2D + c] = its min. Read once per block into shared memory
  // (tot: 3D floats, or D without MinMax); the same floats in every block of the head. Block-wide.
  static __device__ void totals(const QuantParams& p, const Coord& at, float* tot) {
    const unsigned* w = head(p, at.b, at.h);
    const int len = seq_len_of(p, at.b);
    for (int c = threadIdx.x; c < D; c += kThreads) {
      const double sum = ld_cg_f64(reinterpret_cast<const double*>(w + 4) + c);
      tot[c] = len > 0 ? static_cast<float>(sum / static_cast<double>(len)) : 0.f;
      if (MinMax) {
        tot[D + c] = key_value(ld_cg_u32(w + 4 + 2 * D + c));
        tot[2 * D + c] = key_value(~ld_cg_u32(w + 4 + 3 * D + c));
      }
    }
    __syncthreads();
  }

  // The block of tile 0 stores what FinalizeStats would: the mean (smooth) and, with MinMax, the
  // per_channel scales, for the attention kernel.
  static __device__ void publish(const QuantParams& p, const Coord& at, const float* tot, bool smooth) {
    if (at.tile != 0) return;
    for (int c = threadIdx.x; c < D; c += kThreads) {
      if (smooth) p.mean[(static_cast<long long>(at.b) * p.heads + at.h) * D + c] = tot[c];
      if (MinMax)
        const_cast<float*>(p.scale.ptr)[at.b * p.scale.sb + at.h * p.scale.sh + c] =
            scale_of(centred_amax(tot[D + c], tot[2 * D + c], smooth ? tot[c] : 0.f), p.qmax);
    }
  }
};

}  // namespace quant
}  // namespace qattn
