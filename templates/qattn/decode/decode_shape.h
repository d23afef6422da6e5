// Tilings of the split-K decode kernel (decode_mma.cuh), shared by the kernel and the host.
//
// Tiling fields, decode meaning:
//   bm      query rows per CTA (the GQA group times the new tokens of one KV head): 16 or 32; every
//           warp holds all bm rows as bm/16 m16 tiles of the mma.
//   bn      tokens per warp chunk (one cp.async stage of K and V rows): 16, 32 or 64. flashq: a chunk
//           is one 64-token block, computed on in steps of bn tokens.
//   warps   1, 2, 4 or 8; the warps of a CTA take the chunks of its split in turn, each with its own
//           online softmax, merged once at the end through shared memory.
//   stages  2 .. 4 chunks in flight per warp.
// Registers: O (bm/16 * d/8 * 4 floats) + S (bm/16 * bn/8 * 4) + the Q fragments (bm/16 * d/16 * 4)
// stay <= kMaxArrayRegisters.
// Shared memory: per warp and stage a K and a V chunk of raw cache rows (every operand is decoded
// from them into registers); the final merge of the warps reuses the same memory
// (warps x bm x (d + 2) floats).
#pragma once
#include "qattn/decode/kv_layout.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QATTN_DECODE_FN __host__ __device__ constexpr
#else
#define QATTN_DECODE_FN constexpr
#endif

namespace qattn::decode {

constexpr int kMaxArrayRegisters = 200;   // d 256: bm 16 and bn 16 only (bn 32 spilled on sm_90a)
constexpr int kMaxSmemBytes = 227 * 1024;

QATTN_DECODE_FN bool quantized(Fmt kv) { return kv != Fmt::fp16 && kv != Fmt::bf16; }

// Bytes of one warp chunk of K (or V): bn rows, or for flashq one block of kFlashQBlock tokens at the
// widest bit width (4; a flashq chunk is always a whole block, which the kernel computes on in steps of
// bn tokens).
QATTN_DECODE_FN int chunk_bytes(Fmt kv, Gran g, int d, int bn) {
  return kv == Fmt::flashq ? kv::flashq_block_bytes(4, d) : bn * kv::row_bytes(kv, g, d);
}

// flashq: per warp, the (s_c, m_c) tables of the current K and V block (2 x d fp16 pairs), after the
// pipeline.
QATTN_DECODE_FN int param_table_bytes(Fmt kv, int d, int warps) { return kv == Fmt::flashq ? warps * 2 * d * 4 : 0; }

QATTN_DECODE_FN int array_registers(int d, int bm, int bn) {
  return (bm / 16) * (d / 8 * 4 + bn / 8 * 4 + d / 16 * 4);
}

QATTN_DECODE_FN int pipeline_bytes(Fmt kv, Gran g, int d, int bn, int warps, int stages) {
  return warps * stages * 2 * chunk_bytes(kv, g, d, bn);
}

QATTN_DECODE_FN int merge_bytes(int d, int bm, int warps) { return warps * bm * (d + 2) * 4; }

QATTN_DECODE_FN int smem_bytes(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  const int a = pipeline_bytes(kv, g, d, bn, warps, stages) + param_table_bytes(kv, d, warps);
  const int b = merge_bytes(d, bm, warps);
  return a > b ? a : b;
}

QATTN_DECODE_FN bool tiling_ok(Fmt kv, Gran g, int d, int bm, int bn, int warps, int stages) {
  return kv::format_ok(kv, g) && (d == 64 || d == 128 || d == 256) && (bm == 16 || bm == 32) &&
         (bn == 16 || bn == 32 || bn == 64) && (warps == 1 || warps == 2 || warps == 4 || warps == 8) &&
         stages >= 2 && stages <= 4 && array_registers(d, bm, bn) <= kMaxArrayRegisters &&
         smem_bytes(kv, g, d, bm, bn, warps, stages) <= kMaxSmemBytes;
}

}  // namespace qattn::decode

#undef QATTN_DECODE_FN
