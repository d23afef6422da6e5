// Split-K decode attention on tensor cores (the `mma` dataflow): the M = gqa x q_len query rows that
// share a KV head attend to that head's cache; the cache's tokens are split across CTAs (grid.x), and
// each CTA's split is cut into chunks of BN tokens that its warps take in turn.
//
// Per warp and chunk (every operand in registers, fp32 accumulators):
//   S = Q K^T       mma.sync m16n8k16, Q as the A operand with the M rows padded to 16 (the scores
//                   are scaled by softmax_scale * log2 e in fp32 afterwards), K as the B operand
//                   decoded straight from the raw cache rows in shared memory (int8 / int4 / fp8 codes
//                   -> fp16 in registers, no staging).
//                   A B-fragment wants, per lane, consecutive k pairs of one token; the lane reads one
//                   32-bit word (int8, fp8: 4 channels, int4: 8) or 8 bytes (fp16/bf16: 4 channels) of its
//                   token's row instead, and the Q fragment is gathered with the same channel order
//                   (a dot product does not care about the order of its terms).
//   online softmax  in base 2, per warp (no inter-warp traffic inside the loop); softmax=unified_max
//                   (FlashDecoding++): 2^(x2 - phi2) with one constant phi2, no max and no rescale,
//                   and per row flags for the exact fallback (abi.h, DecodeParams; finish())
//   O += P V        P from the S registers (C layout == A layout); V fragments by ldmatrix.trans from
//                   the fp16/bf16 chunk or, for quantized caches, decoded straight from the raw rows
//                   into registers (each lane reads whole words of its tokens' rows; the channel order
//                   this gives is mapped back when the output is written). Per-token scales are folded
//                   into P and the int4 shift into one sum per row, so the codes enter as integers.
// Chunks travel by cp.async in 16-byte units, STAGES per warp in flight; a unit never straddles a
// page because 4 rows are a 16-byte multiple and pages hold a multiple of 4 rows.
// At the end the warps' (max, sum, O) are merged through shared memory; with one split the CTA writes
// the output, otherwise its normalised partial and log2-sum-exp2 for the combine kernel.
// fp8e4m3: the head's K scale folds into the softmax scale and its V scale into O. flashq: run_blocks()
// below (a chunk is one 64-token block, codes through the block's parameter table).
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/decode/chunk_loader.cuh"
#include "qattn/decode/decode_shape.h"
#include "qattn/decode/flashq_dequant.cuh"
#include "qattn/decode/kv_dequant.cuh"
#include "qattn/decode/sas.h"

namespace qattn::decode {

template <Fmt KV, Gran G, Fmt OUT, int D, bool CAUSAL, bool PAGED, SoftmaxMode SMX, int BM, int BN, int WARPS,
          int STAGES>
struct Kernel {
  static_assert(tiling_ok(KV, G, D, BM, BN, WARPS, STAGES), "decode: unsupported format or tiling (decode_shape.h)");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "decode: queries and outputs are fp16 or bf16");
  static_assert(KV != Fmt::flashq || !CAUSAL, "decode: flashq blocks are never masked (the new tokens are in the buffer)");
  static_assert(SMX == SoftmaxMode::exact || SMX == SoftmaxMode::sas || SMX == SoftmaxMode::unified_max,
                "decode: softmax exact, sas or unified_max");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(KV, G, D, BM, BN, WARPS, STAGES);

 private:
  using u16 = dev::u16;
  using u32 = dev::u32;

  static constexpr bool kQuant = quantized(KV);
  static constexpr Fmt kMma = KV == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16;   // element type of both products
  static constexpr int kRow = kv::row_bytes(KV, G, D);
  static constexpr int kHdr = kv::header_bytes(KV, G);
  static constexpr int kGroupChannels = D / kv::groups(KV, G);
  static constexpr int kMT = BM / 16;         // m16 tiles (query rows)
  static constexpr int kSteps = D / 16;       // k16 steps of Q K^T
  static constexpr int kNT = BN / 8;          // n8 tiles of S (tokens)
  static constexpr int kPVSteps = BN / 16;    // k16 steps of P V
  static constexpr int kOC = D / 8;           // n8 tiles of O == 16-byte chunks of an fp16 row
  static constexpr int kChunkBytes = BN * kRow;
  // Chunk copies (chunk_loader.cuh); fp16/bf16 tiles land swizzled for ldmatrix.
  using Loader = ChunkLoader<kRow, BN, PAGED, !kQuant>;
  static constexpr int kWarpPipeBytes = STAGES * 2 * kChunkBytes;   // per stage: K chunk, then V chunk
  static_assert(kChunkBytes % 16 == 0, "chunks are copied in 16-byte units");
  // Per-token scales (and int4 shifts) are factored out of the products instead of applied per element:
  // K: S = scale_t * (Q . codes_t) + shift_t * sum(Q);  V: O = sum_t (P scale_t) codes_t + sum_t P shift_t.
  // The codes enter the tensor cores as exact small integers. Per-group scales vary along d, so int4
  // per_group dequantizes element-wise instead.
  static constexpr bool kFoldK = KV == Fmt::int4 && G == Gran::per_token;
  static constexpr bool kFoldV = KV == Fmt::int8 || kFoldK;
  // Folded int4 codes enter as fp16 subnormals (kv_dequant.cuh, int4_pair_subnormal): no subtraction per
  // pair. K: the odd pairs come 16 times larger, so their Q elements are loaded divided by 16 and S
  // takes 2^24 with the token's scale. V: O's columns of odd pairs carry 2^-20, the others 2^-24,
  // restored in finish().
  static constexpr bool kSubnormalInt4 = kFoldK;

  struct Softmax {
    float o[kMT][kOC][4];
    float m[kMT][2];   // running max (log2 units; -inf until a visible token); unified_max: the lane's
                       // largest score, for the flags only (exponents use phi2)
    float l[kMT][2];   // this lane's partial row sum
    float v_shift[kMT][2];   // this lane's partial sum_t P shift_t (int4 per-token V), in O's scale
    float phi2;              // unified_max: the unified max (log2 units)
  };

  // A plain load from the pipeline's shared memory. Plain C++ (not volatile asm), so the compiler may
  // schedule and merge these loads; the cp.async waits and __syncwarp order them against the copies.
  template <class T>
  static __device__ __forceinline__ T load(const char* p) {
    return *reinterpret_cast<const T*>(p);
  }

  // The body's parts (decode_mma/), each included inside the class so that they share its constants
  // and types: Q·K^T and the mask, the online softmax, P·V, FlashQ's products, the merge and output,
  // and the CTA's main loops.
#include "qattn/decode/decode_mma/scores.cuh"
#include "qattn/decode/decode_mma/softmax.cuh"
#include "qattn/decode/decode_mma/pv.cuh"
#include "qattn/decode/decode_mma/flashq.cuh"
#include "qattn/decode/decode_mma/finish.cuh"
#include "qattn/decode/decode_mma/run.cuh"

  static __device__ void run(const DecodeParams& p, char* smem) {
    if constexpr (KV == Fmt::flashq) {
      // The head's bit widths pick one of four specialisations (uniform over the CTA).
      const int h = blockIdx.y / ((p.heads_q / p.heads_kv * p.q_len + BM - 1) / BM);
      const int kb = p.fq_heads[2 * h], vb = p.fq_heads[2 * (p.heads_kv + h)];
      if (kb == 4 && vb == 4) run_blocks<4, 4>(p, smem);
      else if (kb == 4) run_blocks<4, 2>(p, smem);
      else if (vb == 4) run_blocks<2, 4>(p, smem);
      else run_blocks<2, 2>(p, smem);
    } else {
      run_rows(p, smem);
    }
  }
};

}  // namespace qattn::decode
