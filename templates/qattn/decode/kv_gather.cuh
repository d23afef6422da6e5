// Reads each sequence's first kv_lens[b] cache rows (kv_layout.h) back as a packed dense tensor of the
// 16-bit output type: sequence b's rows start at cu[b] = sum over j < b of min(kv_lens[j], max_len),
// [rows, heads_kv, d]. Prefill over a cache runs the variable-length attention on that tensor. One warp
// per (sequence, KV head, token) row, lane l holding channels [l * D/32, (l + 1) * D/32); the values are
// the layout's dequantization in fp32, rounded once to the output type.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/fp8_e4m3.h"
#include "qattn/decode/kv_layout.h"

namespace qattn::decode {

template <Fmt KV, Gran G, Fmt OUT, int D, bool PAGED>
struct Gather {
  static_assert(kv::format_ok(KV, G) && KV != Fmt::flashq, "kv gather: a row format of kv_layout.h");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;

 private:
  using u16 = dev::u16;
  using u8 = dev::u8;
  static constexpr int kPer = D / 32;
  static constexpr int kRow = kv::row_bytes(KV, G, D);
  static constexpr int kHdr = kv::header_bytes(KV, G);
  static constexpr int kGroupChannels = D / kv::groups(KV, G);

  static __device__ __forceinline__ int length(const KvGatherParams& p, int b) { return min(p.kv_lens[b], p.max_len); }

 public:
  static __device__ void run(const KvGatherParams& p) {
    const int lane = threadIdx.x % 32;
    const int t = blockIdx.x * kWarps + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    int first = 0;
    for (int j = 0; j < b; ++j) first += length(p, j);
    const int len = length(p, b);
    if (p.cu_seqlens && blockIdx.x == 0 && h == 0 && threadIdx.x == 0) {
      p.cu_seqlens[b + 1] = first + len;
      if (b == 0) p.cu_seqlens[0] = 0;
    }
    if (t >= len) return;
    long long page = b, slot = t;
    if constexpr (PAGED) {
      page = p.block_table[(long long)b * p.table_stride + t / p.page_size];
      slot = t % p.page_size;
    }
    const u8* row = p.cache.ptr + page * p.cache.page_stride + h * p.cache.head_stride + slot * kRow;
    u16* out = static_cast<u16*>(p.out) + ((long long)(first + t) * p.heads_kv + h) * D + lane * kPer;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int c = lane * kPer + k;
      if constexpr (KV == Fmt::fp16 || KV == Fmt::bf16) {
        out[k] = reinterpret_cast<const u16*>(row)[c];
      } else {
        float x;
        if constexpr (KV == Fmt::int8) {
          x = __fmul_rn(*reinterpret_cast<const float*>(row), static_cast<float>(static_cast<signed char>(row[kHdr + c])));
        } else if constexpr (KV == Fmt::fp8e4m3) {
          x = __fmul_rn(p.head_scale[h], fp8::decode_e4m3(row[c]));
        } else {   // int4: x = q * scale + shift with the group's fp16 scale and shift
          const u16* hdr = reinterpret_cast<const u16*>(row) + 2 * (c / kGroupChannels);
          const int q = (row[kHdr + c / 2] >> (4 * (c & 1))) & 0xF;
          x = __fmaf_rn(static_cast<float>(q), dev::half_to_float(hdr[0]), dev::half_to_float(hdr[1]));
        }
        if (p.k_mean) x = __fadd_rn(x, p.k_mean[h * D + c]);   // a K-smoothed cache: the mean back
        out[k] = dev::from_float<OUT>(x);
      }
    }
  }
};

}  // namespace qattn::decode
