// The FlashQ KV cache's write side (TurboAttention; byte layout: the flashq paragraph of
// qattn/decode/kv_layout.h): statistics and quantization of the prefill tokens, and the decode step's
// flush + append. Every kernel is a 128-thread CTA taking FlashQPackParams (flashq_params.h):
//   FlashQStats    grid (ceil(n/64), heads_kv, 2 batch): per-channel min / max of the prefill tokens into
//                  stats (atomics; min and max do not depend on the order).
//   FlashQPrefill  grid (ceil(n/64), heads_kv, 2 batch): CTA (j, h, 2b + kv) compresses block j of
//                  sequence b (stage 1: alpha = absmax / 127 of the block; stage 2 per channel), or, for
//                  j = compressed_lens[b] / 64, writes the remaining buffer_lens[b] tokens into the
//                  INT8 buffer with the head's universal scale.
//   FlashQAppend   grid (heads_kv, 2, batch): CTA (h, kv, b) first flushes (when buffer_lens[b] >= 64
//                  and a block is free: buffer rows [0, 64) become block compressed_lens[b] / 64 with
//                  alpha = the universal scale, rows [64, buffer_len) move to the front), then
//                  quantizes the n new tokens into the buffer rows after the kept ones.
//   FlashQLens     grid (ceil(batch/128)): advances compressed_lens / buffer_lens as FlashQAppend did
//                  (a separate launch: every CTA of a sequence must read the old lengths).
// The arithmetic is IEEE fp32 with explicit rounding (__fdiv_rn, __float2int_rn) plus integers, so a
// host model written from kv_layout.h produces the same bytes (tests/common/flashq_reference.cpp).
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/flashq_params.h"
#include "qattn/decode/kv_layout.h"

namespace qattn::decode::flashq {

using dev::i8;
using dev::u16;
using dev::u32;
using dev::u8;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kBlock = kv::kFlashQBlock;

// A block's INT8 values (token-major) and its stage-2 parameters, in shared memory.
template <int D>
struct Tile {
  i8 x8[kBlock * D];
  int s[D];
  int m[D];
  float red[kWarps];
};

// The one INT8 code of every FlashQ path: rint(x / scale) clamped to [-127, 127]; 0 for scale 0.
__device__ __forceinline__ int code8(float x, float scale) {
  return scale > 0.f ? min(127, max(-127, __float2int_rn(__fdiv_rn(x, scale)))) : 0;
}

// Whether the append flushes: a full buffer and a free block (the lens kernel repeats this test).
__device__ __forceinline__ bool flush_now(int compressed, int buffered, int max_blocks) {
  return buffered >= kBlock && compressed / kBlock < max_blocks;
}

template <bool PAGED>
__device__ __forceinline__ u8* block_ptr(const FlashQPackParams& p, int kv, int b, int h, int j) {
  const long long page = PAGED ? p.block_table[(long long)b * p.table_stride + j] : (long long)b * p.max_blocks + j;
  return p.cache[kv].blocks + page * p.cache[kv].page_stride + p.heads[(kv * p.heads_kv + h) * 2 + 1];
}

template <int D>
__device__ __forceinline__ u8* buffer_row(const FlashQCacheRef& c, int b, int h, int slot) {
  return c.buffer + (long long)b * c.buffer_page_stride + (long long)h * c.buffer_head_stride +
         (long long)slot * kv::row_bytes(Fmt::int8, Gran::per_token, D);
}

template <Fmt IN>
__device__ __forceinline__ const u16* token_ptr(const TensorRef& x, int b, int h, int t) {
  return static_cast<const u16*>(x.ptr) + (long long)b * x.sb + (long long)h * x.sh + (long long)t * x.ss;
}

// One buffer row (int8:per_token layout, the universal scale in the header) from token t; one warp,
// lane l owns channels [l D/32, (l + 1) D/32).
template <Fmt IN, int D>
__device__ __forceinline__ void quantize_row(const TensorRef& x, int b, int h, int t, float scale, u8* row, int lane) {
  constexpr int kPer = D / 32;
  const u16* src = token_ptr<IN>(x, b, h, t) + lane * kPer;
  if (lane == 0) *reinterpret_cast<float*>(row) = scale;
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    row[4 + lane * kPer + k] = static_cast<u8>(static_cast<i8>(code8(dev::to_float<IN>(src[k]), scale)));
}

// Stage-2 codes of one block for BITS bits: word w of the code area holds token w / words, channels
// [(w % words) * 32/BITS, ...) from the low bits up (int4: low nibble first; int2: 2 bits each).
// code = rint((x8 - m) / s) (round half to even, in integers), at most 2^BITS - 1.
template <int D, int BITS>
__device__ __forceinline__ void pack_codes(const Tile<D>& t, u8* block) {
  constexpr int kWords = D * BITS / 32, kPerWord = 32 / BITS, kLevels = (1 << BITS) - 1;
  u32* codes = reinterpret_cast<u32*>(block + kv::flashq_codes_offset(D));
  for (int w = threadIdx.x; w < kBlock * kWords; w += kThreads) {
    const int r = w / kWords, c0 = (w % kWords) * kPerWord;
    u32 word = 0;
#pragma unroll
    for (int k = 0; k < kPerWord; ++k) {
      const int c = c0 + k, s = t.s[c];
      const int n = t.x8[r * D + c] - t.m[c];
      int q = n / s;
      const int rem = n - q * s;
      if (2 * rem > s || (2 * rem == s && (q & 1))) ++q;
      word |= static_cast<u32>(min(q, kLevels)) << (k * BITS);
    }
    codes[w] = word;
  }
}

// Stage 2 of a block whose INT8 values are in t.x8: per channel s_c = max(1, ceil(range / (2^bits-1))),
// m_c = min; writes the whole block (alpha, zero pad, s_c, m_c, codes). Every thread of the CTA calls it.
template <int D>
__device__ void compress_tile(Tile<D>& t, float alpha, int bits, u8* block) {
  const int levels = (1 << bits) - 1;
  for (int c = threadIdx.x; c < D; c += kThreads) {
    int mn = t.x8[c], mx = t.x8[c];
    for (int r = 1; r < kBlock; ++r) {
      const int v = t.x8[r * D + c];
      mn = min(mn, v);
      mx = max(mx, v);
    }
    const int s = max(1, (mx - mn + levels - 1) / levels);
    t.s[c] = s;
    t.m[c] = mn;
    block[kv::kFlashQHeaderBytes + c] = static_cast<u8>(s);
    block[kv::kFlashQHeaderBytes + D + c] = static_cast<u8>(static_cast<i8>(mn));
  }
  if (threadIdx.x < kv::kFlashQHeaderBytes / 4)
    reinterpret_cast<u32*>(block)[threadIdx.x] = threadIdx.x == 0 ? __float_as_uint(alpha) : 0u;
  __syncthreads();
  if (bits == 2) pack_codes<D, 2>(t, block);
  else pack_codes<D, 4>(t, block);
}

// float atomics through the integer order of IEEE floats (non-negative: as int; negative: reversed, as
// unsigned). -0 is taken as +0 first, so both zeros order like 0.
__device__ __forceinline__ void atomic_min_float(float* a, float v) {
  v = v == 0.f ? 0.f : v;
  if (v >= 0.f) atomicMin(reinterpret_cast<int*>(a), __float_as_int(v));
  else atomicMax(reinterpret_cast<unsigned*>(a), __float_as_uint(v));
}
__device__ __forceinline__ void atomic_max_float(float* a, float v) {
  v = v == 0.f ? 0.f : v;
  if (v >= 0.f) atomicMax(reinterpret_cast<int*>(a), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned*>(a), __float_as_uint(v));
}

template <Fmt IN, int D>
struct Stats {
  static_assert(D % 32 == 0 && D <= 256, "flashq: d must be a multiple of 32, at most 256");
  static __device__ void run(const FlashQPackParams& p) {
    const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z / 2, kv = blockIdx.z % 2;
    const int len = p.compressed_lens[b] + p.buffer_lens[b];
    const int t0 = j * kBlock, t1 = min(len, t0 + kBlock);
    if (t0 >= t1) return;
    for (int c = threadIdx.x; c < D; c += kThreads) {
      float mn = dev::to_float<IN>(token_ptr<IN>(p.x[kv], b, h, t0)[c]), mx = mn;
      for (int t = t0 + 1; t < t1; ++t) {
        const float v = dev::to_float<IN>(token_ptr<IN>(p.x[kv], b, h, t)[c]);
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
      }
      float* st = p.stats + (long long)((kv * p.heads_kv + h) * 2) * D;
      atomic_min_float(st + c, mn);
      atomic_max_float(st + D + c, mx);
    }
  }
};

template <Fmt IN, int D, bool PAGED>
struct Prefill {
  static_assert(D % 32 == 0 && D <= 256, "flashq: d must be a multiple of 32, at most 256");
  static __device__ void run(const FlashQPackParams& p) {
    __shared__ Tile<D> tile;
    const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z / 2, kv = blockIdx.z % 2;
    const int compressed = p.compressed_lens[b], buffered = p.buffer_lens[b];
    const FlashQCacheRef& cache = p.cache[kv];
    if (j < compressed / kBlock) {
      // Stage 1: alpha = absmax / 127 over the block's 64 tokens and d channels.
      float amax = 0.f;
      for (int e = threadIdx.x; e < kBlock * D; e += kThreads)
        amax = fmaxf(amax, fabsf(dev::to_float<IN>(token_ptr<IN>(p.x[kv], b, h, j * kBlock + e / D)[e % D])));
      amax = dev::warp_max(amax);
      if (threadIdx.x % 32 == 0) tile.red[threadIdx.x / 32] = amax;
      __syncthreads();
#pragma unroll
      for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, tile.red[w]);
      const float alpha = __fdiv_rn(amax, 127.f);
      for (int e = threadIdx.x; e < kBlock * D; e += kThreads)
        tile.x8[e] = static_cast<i8>(code8(dev::to_float<IN>(token_ptr<IN>(p.x[kv], b, h, j * kBlock + e / D)[e % D]), alpha));
      __syncthreads();
      compress_tile<D>(tile, alpha, p.heads[(kv * p.heads_kv + h) * 2], block_ptr<PAGED>(p, kv, b, h, j));
    } else if (j == compressed / kBlock) {
      const float scale = cache.scale8[h];
      for (int i = threadIdx.x / 32; i < buffered; i += kWarps)
        quantize_row<IN, D>(p.x[kv], b, h, compressed + i, scale, buffer_row<D>(cache, b, h, i), threadIdx.x % 32);
    }
  }
};

template <Fmt IN, int D, bool PAGED>
struct Append {
  static_assert(D % 32 == 0 && D <= 256, "flashq: d must be a multiple of 32, at most 256");
  static __device__ void run(const FlashQPackParams& p) {
    __shared__ Tile<D> tile;
    const int h = blockIdx.x, kv = blockIdx.y, b = blockIdx.z;
    const FlashQCacheRef& cache = p.cache[kv];
    const float scale = cache.scale8[h];
    const int compressed = p.compressed_lens[b];
    int buffered = p.buffer_lens[b];
    if (flush_now(compressed, buffered, p.max_blocks)) {
      constexpr int kCodeWords = D / 4, kRowWords = (4 + D) / 4;
      for (int w = threadIdx.x; w < kBlock * kCodeWords; w += kThreads)
        reinterpret_cast<u32*>(tile.x8)[w] =
            reinterpret_cast<const u32*>(buffer_row<D>(cache, b, h, w / kCodeWords) + 4)[w % kCodeWords];
      __syncthreads();   // rows [0, 64) are in shared memory before the move overwrites them
      for (int w = threadIdx.x; w < (buffered - kBlock) * kRowWords; w += kThreads)
        reinterpret_cast<u32*>(buffer_row<D>(cache, b, h, w / kRowWords))[w % kRowWords] =
            reinterpret_cast<const u32*>(buffer_row<D>(cache, b, h, kBlock + w / kRowWords))[w % kRowWords];
      compress_tile<D>(tile, scale, p.heads[(kv * p.heads_kv + h) * 2], block_ptr<PAGED>(p, kv, b, h, compressed / kBlock));
      buffered -= kBlock;
    }
    // The new tokens go after the kept rows (slots [buffered, buffered + n) never overlap the moved
    // rows' sources [64, 80)); rows past the buffer's capacity are dropped (a cache out of blocks).
    for (int i = threadIdx.x / 32; i < p.n; i += kWarps)
      if (buffered + i < kv::kFlashQBufferRows)
        quantize_row<IN, D>(p.x[kv], b, h, i, scale, buffer_row<D>(cache, b, h, buffered + i), threadIdx.x % 32);
  }
};

struct Lens {
  static __device__ void run(const FlashQPackParams& p) {
    const int b = blockIdx.x * kThreads + threadIdx.x;
    if (b >= p.batch) return;
    int compressed = p.compressed_lens[b], buffered = p.buffer_lens[b];
    if (flush_now(compressed, buffered, p.max_blocks)) {
      compressed += kBlock;
      buffered -= kBlock;
    }
    p.compressed_lens[b] = compressed;
    p.buffer_lens[b] = min(buffered + p.n, kv::kFlashQBufferRows);
  }
};

}  // namespace qattn::decode::flashq
