// Writes new tokens (fp16/bf16) into a KV cache, quantizing them into its format (kv_layout.h), at
// positions start[b] + i of each sequence, or at the rows a slot mapping names (KvAppendParams).
// One warp per (sequence, KV head, token) row; lane l holds the D/32 consecutive channels
// [l * D/32, (l + 1) * D/32). The arithmetic is the documented one, in IEEE fp32 with explicit
// rounding (no contraction), so a host quantizer written from kv_layout.h produces the same bytes.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/fp8_e4m3.h"
#include "qattn/decode/kv_layout.h"

namespace qattn::decode {

template <Fmt KV, Gran G, Fmt IN, int D, bool PAGED>
struct Append {
  static_assert(kv::format_ok(KV, G), "kv append: unsupported cache format");
  static_assert(KV == Fmt::int8 || KV == Fmt::int4 || KV == Fmt::fp8e4m3 || KV == IN,
                "kv append: fp16/bf16 caches take their own type");
  static_assert(KV != Fmt::flashq, "kv append: flashq caches are written by flashq_pack.cuh");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;

 private:
  using u16 = dev::u16;
  using u8 = dev::u8;
  static constexpr int kPer = D / 32;                                  // channels per lane
  static constexpr int kRow = kv::row_bytes(KV, G, D);
  static constexpr int kHdr = kv::header_bytes(KV, G);
  static constexpr int kGroupLanes = 32 / kv::groups(KV, G);            // lanes per int4 group

  template <int LANES>
  static __device__ __forceinline__ float group_max(float v) {
#pragma unroll
    for (int m = LANES / 2; m > 0; m >>= 1) v = fmaxf(v, dev::shfl_xor(v, m));
    return v;
  }
  template <int LANES>
  static __device__ __forceinline__ float group_min(float v) {
#pragma unroll
    for (int m = LANES / 2; m > 0; m >>= 1) v = fminf(v, dev::shfl_xor(v, m));
    return v;
  }

 public:
  static __device__ void run(const KvAppendParams& p) {
    const int lane = threadIdx.x % 32;
    const int i = blockIdx.x * kWarps + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= p.n_new) return;
    const u16* x = static_cast<const u16*>(p.x.ptr) + (long long)b * p.x.sb + (long long)h * p.x.sh +
                   (long long)i * p.x.ss + lane * kPer;
    float v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = dev::to_float<IN>(x[k]);
    if (p.k_mean) {   // K smoothing: the cache stores x - mean[h]
      const float* mean = p.k_mean + h * D + lane * kPer;
#pragma unroll
      for (int k = 0; k < kPer; ++k) v[k] = __fsub_rn(v[k], mean[k]);
    }

    long long page = b, slot;
    if (p.slot_mapping) {
      const long long s = p.slot_mapping[i];
      if (s < 0 || s >= p.num_slots) return;
      page = s / p.page_size;
      slot = s % p.page_size;
    } else {
      const int t = p.start[b] + i;
      slot = t;
      if constexpr (PAGED) {
        page = p.block_table[(long long)b * p.table_stride + t / p.page_size];
        slot = t % p.page_size;
      }
    }
    u8* row = p.cache.ptr + page * p.cache.page_stride + h * p.cache.head_stride + slot * kRow;

    if constexpr (KV == Fmt::fp16 || KV == Fmt::bf16) {
      u16* dst = reinterpret_cast<u16*>(row) + lane * kPer;
#pragma unroll
      for (int k = 0; k < kPer; ++k) dst[k] = x[k];
    } else if constexpr (KV == Fmt::int8) {
      float amax = 0.f;
#pragma unroll
      for (int k = 0; k < kPer; ++k) amax = fmaxf(amax, fabsf(v[k]));
      amax = group_max<32>(amax);
      const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
      if (lane == 0) *reinterpret_cast<float*>(row) = __fdiv_rn(amax, 127.f);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int q = min(127, max(-127, __float2int_rn(__fmul_rn(v[k], inv))));
        row[kHdr + lane * kPer + k] = static_cast<u8>(static_cast<signed char>(q));
      }
    } else if constexpr (KV == Fmt::fp8e4m3) {
      const float inv = __fdiv_rn(1.f, p.head_scale[h]);
#pragma unroll
      for (int k = 0; k < kPer; ++k) row[lane * kPer + k] = fp8::encode_e4m3(__fmul_rn(v[k], inv));
    } else {   // int4, asymmetric per group, codes computed with the fp16-rounded scale and shift
      float mn = v[0], mx = v[0];
#pragma unroll
      for (int k = 1; k < kPer; ++k) {
        mn = fminf(mn, v[k]);
        mx = fmaxf(mx, v[k]);
      }
      mn = group_min<kGroupLanes>(mn);
      mx = group_max<kGroupLanes>(mx);
      const u16 scale_h = dev::float_to_half(__fdiv_rn(__fsub_rn(mx, mn), 15.f));
      const u16 shift_h = dev::float_to_half(mn);
      const float scale = dev::half_to_float(scale_h), shift = dev::half_to_float(shift_h);
      const float inv = scale > 0.f ? __fdiv_rn(1.f, scale) : 0.f;
      if (lane % kGroupLanes == 0) {
        u16* hdr = reinterpret_cast<u16*>(row) + 2 * (lane / kGroupLanes);
        hdr[0] = scale_h;
        hdr[1] = shift_h;
      }
#pragma unroll
      for (int k = 0; k < kPer; k += 2) {
        const int q0 = min(15, max(0, __float2int_rn(__fmul_rn(__fsub_rn(v[k], shift), inv))));
        const int q1 = min(15, max(0, __float2int_rn(__fmul_rn(__fsub_rn(v[k + 1], shift), inv))));
        row[kHdr + (lane * kPer + k) / 2] = static_cast<u8>(q0 | (q1 << 4));
      }
    }
  }
};

}  // namespace qattn::decode
