// Device helpers of the quantization passes: 16-byte loads of fp16/bf16 rows, rounding to symmetric
// integer codes, and the reductions the passes share. Compiled by NVRTC only, no CUDA headers.
#pragma once

#include "qattn/abi.h"
#include "qattn/quant/quant_config.h"

namespace qattn {
namespace quant {

// Eight input elements as floats (one 16-byte vector of fp16 or bf16).
struct Vec8 {
  float v[kVecElems];
};

__device__ __forceinline__ void unpack_fp16x2(unsigned w, float& lo, float& hi) {
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
}

// bf16 is the top half of an fp32: widening is exact with shifts.
__device__ __forceinline__ void unpack_bf16x2(unsigned w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

template <Fmt In>
__device__ __forceinline__ Vec8 unpack8(const uint4& raw) {
  static_assert(In == Fmt::fp16 || In == Fmt::bf16, "quantizer input must be fp16 or bf16");
  Vec8 r;
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (In == Fmt::fp16) {
      unpack_fp16x2(w[i], r.v[2 * i], r.v[2 * i + 1]);
    } else {
      unpack_bf16x2(w[i], r.v[2 * i], r.v[2 * i + 1]);
    }
  }
  return r;
}

// The input is only read: the non-coherent path keeps it out of the way of the stores.
__device__ __forceinline__ uint4 load16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Element (b, h, s, c) of a TensorRef, as a typed pointer (strides are in elements).
template <class T>
__device__ __forceinline__ T* element_ptr(const TensorRef& t, int b, int h, long long s, int c) {
  return static_cast<T*>(t.ptr) + (b * t.sb + h * t.sh + s * t.ss + c * t.sc);
}

// The input rows of one (b, h) and the sequence's own length. Dense input (cu_seqlens null): seq_len
// tokens, element (b, h, s, c) at x.ptr + b*sb + h*sh + s*ss + c*sc. Packed variable-length input:
// sequence b is rows [cu_seqlens[b], cu_seqlens[b + 1]) of x, its token s at packed row cu_seqlens[b] + s
// (x.sb unused), i.e. element (0, h, cu_seqlens[b] + s, c). Every pass reads its rows through here and
// compares with the length (len, seq_len_of) where a dense pass compares with seq_len, so both forms run
// the same kernel: a run-time check, not a template parameter.
// A sequence longer than seq_len is cut to it (its rows would not fit the dense outputs), as the attention
// kernels cut it.
__device__ __forceinline__ int seq_len_of(const QuantParams& p, int b) {
  return p.cu_seqlens ? min(p.cu_seqlens[b + 1] - p.cu_seqlens[b], p.seq_len) : p.seq_len;
}

struct InputRows {
  const QuantParams& p;
  int b, h, s0;   // packed input: b = 0 and token s is row s0 + s
  int len;        // tokens of the sequence (<= seq_len)
  __device__ __forceinline__ const unsigned short* at(int s, int c) const {
    return element_ptr<const unsigned short>(p.x, b, h, s0 + s, c);
  }
};

__device__ __forceinline__ InputRows input_rows(const QuantParams& p, int b, int h) {
  return p.cu_seqlens ? InputRows{p, 0, h, p.cu_seqlens[b], seq_len_of(p, b)}
                      : InputRows{p, b, h, 0, p.seq_len};
}

// a / b, the IEEE quotient, without the subroutine call that fp32 division makes for its slow path on
// sm_80 .. sm_89: ptxas saves the registers live across that call, which it reports as spill stores
// (the d 256 Q passes showed 8-12 bytes). The correctly rounded reciprocal and one fma correction
// (Markstein) instead. Checked exhaustively on the CPU against IEEE division for every normal a and
// b = 7, 127, 448, as a / b and as b / a: identical wherever the quotient is a normal float, except at
// one a (3.7e-37, quotient at FLT_MAX) where the first product overflows: there, as for every
// overflowing quotient, the result is inf. (Quotients in the subnormal range may differ in the last
// bit: amax below ~1e-35, bf16 input only.)
__device__ __forceinline__ float div_rn(float a, float b) {
  const float y = __frcp_rn(b);
  const float q = __fmul_rn(a, y);
  if (q > 3.40282347e38f) return q;   // inf (a, b >= 0 here)
  return fmaf(fmaf(-q, b, a), y, q);
}

// Reciprocal of the scale: codes are x * (qmax / amax). An all-zero group gets 0, never inf or NaN.
__device__ __forceinline__ float code_multiplier(float amax, float qmax) { return amax > 0.f ? div_rn(qmax, amax) : 0.f; }

__device__ __forceinline__ float scale_of(float amax, float qmax) { return div_rn(amax, qmax); }

// Round half to even (cvt.rni), then clamp to the symmetric range [-qmax, qmax]: -128 never appears.
__device__ __forceinline__ int to_code(float x, float mult, int qmax) {
  const int c = __float2int_rn(x * mult);
  return min(max(c, -qmax), qmax);
}

__device__ __forceinline__ unsigned pack4_s8(int a, int b, int c, int d) {
  return (unsigned(a) & 0xffu) | ((unsigned(b) & 0xffu) << 8) | ((unsigned(c) & 0xffu) << 16) |
         (unsigned(d) << 24);
}

// Eight codes in [-8, 7] as eight two's-complement nibbles, code i in bits 4i..4i+3: byte j holds
// codes 2j (low nibble) and 2j + 1 (high nibble), the layout of mma.sync's .s4 operands.
__device__ __forceinline__ unsigned pack8_s4(const int (&c)[8]) {
  unsigned r = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) r |= (unsigned(c[i]) & 0xfu) << (4 * i);
  return r;
}

// Max over aligned groups of `width` lanes (width a power of two dividing 32).
template <int width>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int off = width / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The abs-max of row r's scale group, from the abs-maxes of the rows of a tile that holds whole groups
// (the groups of generator/quant_plan.hpp): per_warp and per_block: Group consecutive rows; per_thread with Group 32
// (Q): rows g, g+8, g+16, g+24 of a 32-row chunk; with Group 64 (K): keys 8i+2t, 8i+2t+1 (i < 8) of a
// 64-key block; per_token: the row itself. Shared by the row quantizer and the attention kernel's fused Q.
template <Gran G, int Group>
__device__ __forceinline__ float row_group_max(const float* row_amax, int r) {
  float amax = 0.f;
  if constexpr (G == Gran::per_warp || G == Gran::per_block) {
    const int first = r / Group * Group;
    for (int i = 0; i < Group; ++i) amax = fmaxf(amax, row_amax[first + i]);
  } else if constexpr (G == Gran::per_thread && Group == 32) {
    const int first = r / 32 * 32 + r % 8;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, row_amax[first + 8 * i]);
  } else if constexpr (G == Gran::per_thread) {
    static_assert(Group == 64, "per_thread groups: 32 (Q) or 64 (K)");
    const int first = r / 64 * 64 + (r % 8) / 2 * 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fmaxf(row_amax[first + 8 * i], row_amax[first + 8 * i + 1]));
  } else {
    amax = row_amax[r];
  }
  return amax;
}

// Max over the block; every thread gets the result. `red` holds one float per warp.
template <int threads>
__device__ __forceinline__ float block_max(float v, float* red) {
  v = group_max<32>(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < threads / 32 ? red[lane] : 0.f;
  v = group_max<32>(v);
  return v;
}

// Non-negative floats order like their bit patterns as signed ints, so an int atomicMax is a float max.
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
}

__device__ __forceinline__ float* stats_base(const QuantParams& p) {
  return p.amax_scratch + kStatsOffset;
}

// Channel statistics of one (b, h, split) when each head has `splits` chunks: [sum | max | min][d].
__device__ __forceinline__ long long stats_index(const QuantParams& p, int b, int h, int split, int splits, int d) {
  return ((static_cast<long long>(b) * p.heads + h) * splits + split) * 3LL * d;
}

}  // namespace quant
}  // namespace qattn
