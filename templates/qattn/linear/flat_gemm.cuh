// Flat GEMM for a few tokens on tensor cores (the `flat` dataflow, FlashDecoding++'s ImplB).
//
// The product is computed transposed, Cᵀ = W·Aᵀ, so that the output channels fill the 16-row side of
// mma.m16n8k16 and the BM = 8 or 16 tokens its 8-wide side (one or two n8 fragments): tokens are
// padded to 8, not to 16 or 64. A CTA owns BN channels and walks its split of K sequentially through a
// STAGES-deep cp.async ring of (W tile, A tile[, int4 scales]) (stage_loader.cuh); warp w owns channels
// w * BN / WARPS .. as kMT m16 tiles and reads every token of the A tile.
//
// Fragments (lane = 4g + t; mma.cuh for the m16n8k16 layouts):
//   W, 16-bit  ldmatrix.x4 of rows 16i + 0..7 / 8..15 at chunks 2s / 2s + 1: the A operand as stored.
//   W, int8 / int4  the same ldmatrix on the codes; lane gets 4 int8 or 8 int4 codes of rows g and g + 8
//              per tile, decoded in registers to A's type in the k order of weight_tile.cuh (int4: the
//              order of int4x8_to_step_pairs, which takes no byte permute).
//   tokens     16-bit W: ldmatrix (.x2 for one n8 fragment, .x4 for two) of the A tile, rows = tokens;
//              quantized W: the 4 (int8) or 8 (int4) consecutive activations of the same permuted k
//              (one 8- or 16-byte shared load per row and step; int4: paired by 4 byte permutes).
//   C          d[0..1] = channel g, tokens 2t, 2t + 1; d[2..3] = channel g + 8.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/split_k_epilogue.cuh"
#include "qattn/linear/stage_loader.cuh"
#include "qattn/linear/weight_tile.cuh"

namespace qattn::linear {

template <Fmt A, Fmt W, Fmt OUT, int N, int K, bool BIAS, int BM, int BN, int WARPS, int STAGES>
struct FlatGemm {
  static_assert(linear_tiling_problem(Dataflow::flat, A, W, BM, BN, WARPS, STAGES, false) == nullptr,
                "linear flat: unsupported formats or tiling (linear_shape.h)");
  static_assert(K % (128 / weight_bits(W)) == 0 && (W != Fmt::int4 || K % kLinearInt4Group == 0),
                "linear flat: K must be a multiple of 8 (16-bit W), 16 (int8) or 128 (int4)");

  static constexpr int kThreads = WARPS * 32;

 private:
  using u32 = dev::u32;
  using Loader = StageLoader<Dataflow::flat, W, K, BM, BN, kThreads>;
  using Epi = Epilogue<W, OUT, BIAS>;

  static constexpr int kMT = BN / WARPS / 16;   // m16 tiles (channels) per warp
  static constexpr int kNT = BM / 8;            // n8 fragments (tokens)
  static constexpr int kWChunks = Loader::kWChunks;
  static constexpr int kAChunks = Loader::kAChunks;
  static constexpr bool kQuant = W == Fmt::int8 || W == Fmt::int4;

  using Acc = float[kMT][kNT][4];

  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    dev::mma_m16n8k16_f32<A>(d, a, b);
  }

  // The W fragments of rows row0 .. row0 + 15 at chunks c, c + 1: r[0] rows 0-7 / chunk c, r[1] rows
  // 8-15 / c, r[2] rows 0-7 / c + 1, r[3] rows 8-15 / c + 1.
  static __device__ __forceinline__ void load_w(u32 (&r)[4], u32 w_tile, int row0, int c, int lane) {
    const int row = row0 + (lane & 7) + 8 * ((lane >> 3) & 1);
    dev::ldmatrix_x4(r, w_tile + dev::swizzled_offset<kWChunks>(row, c + (lane >> 4)));
  }

  // 16-bit W: one k16 step (chunks 2s, 2s + 1) of every m tile and token fragment.
  static __device__ __forceinline__ void step_16bit(Acc& acc, u32 w_tile, u32 a_tile, int wrow, int s, int lane) {
    u32 b[kNT][2];
    if constexpr (kNT == 2) {
      u32 r[4];
      dev::ldmatrix_x4(r, a_tile + dev::swizzled_offset<kAChunks>((lane & 7) + 8 * (lane >> 4), 2 * s + ((lane >> 3) & 1)));
      b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    } else {
      u32 r[2];
      dev::ldmatrix_x2(r, a_tile + dev::swizzled_offset<kAChunks>(lane & 7, 2 * s + ((lane >> 3) & 1)));
      b[0][0] = r[0], b[0][1] = r[1];
    }
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      u32 a[4];
      load_w(a, w_tile, wrow + 16 * i, 2 * s, lane);
#pragma unroll
      for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[j]);
    }
  }

  // int8: chunks 2cp, 2cp + 1 (16 codes, one k16 step each).
  static __device__ __forceinline__ void steps_int8(Acc& acc, u32 w_tile, u32 a_tile, int wrow, int cp, int lane) {
    const int g = lane >> 2, t = lane & 3;
    u32 b[2][kNT][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        // Activations 16c + 4t .. + 3 of token 8j + g: bytes 32c + 8t of its row.
        const int c = 2 * cp + h;
        const dev::U32x2 v = ld_shared_8(a_tile + dev::swizzled_offset<kAChunks>(8 * j + g, 2 * c + (t >> 1)) + 8 * (t & 1));
        b[h][j][0] = v.x, b[h][j][1] = v.y;
      }
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      u32 r[4];
      load_w(r, w_tile, wrow + 16 * i, 2 * cp, lane);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 a[4];
        int8x4_to_pairs<A>(r[2 * h], a[0], a[2]);
        int8x4_to_pairs<A>(r[2 * h + 1], a[1], a[3]);
#pragma unroll
        for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[h][j]);
      }
    }
  }

  // int4: chunks 2cp, 2cp + 1 (32 codes, two k16 steps each) in the k order of int4x8_to_step_pairs;
  // s2 / nzs2: int4_group_constants of rows g and g + 8 of every m tile for the group of these chunks.
  static __device__ __forceinline__ void steps_int4(Acc& acc, u32 w_tile, u32 a_tile, int wrow, int cp,
                                                    const u32 (&s2)[kMT][2], const u32 (&nzs2)[kMT][2], int lane) {
    const int g = lane >> 2, t = lane & 3;
    // Activations 32c + 8t .. + 7 of token 8j + g (chunk c = 2cp + h): chunk 4c + t of its row.
    u32 b[2][kNT][2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kNT; ++j)
        activation_step_pairs(dev::ld_shared_16(a_tile + dev::swizzled_offset<kAChunks>(8 * j + g, 4 * (2 * cp + h) + t)),
                              b[h][j]);
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      u32 r[4];
      load_w(r, w_tile, wrow + 16 * i, 2 * cp, lane);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 lo_g[2], hi_g[2], lo_g8[2], hi_g8[2];   // rows g and g + 8
        int4x8_to_step_pairs<A>(r[2 * h], s2[i][0], nzs2[i][0], lo_g, hi_g);
        int4x8_to_step_pairs<A>(r[2 * h + 1], s2[i][1], nzs2[i][1], lo_g8, hi_g8);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const u32 a[4] = {lo_g[s], lo_g8[s], hi_g[s], hi_g8[s]};
#pragma unroll
          for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[h][j][s]);
        }
      }
    }
  }

  static __device__ __forceinline__ void compute(Acc& acc, u32 st, int wrow, int lane) {
    const u32 w_tile = st + Loader::kWOffset, a_tile = st + Loader::kAOffset;
    if constexpr (W == Fmt::int8) {
#pragma unroll
      for (int cp = 0; cp < kWChunks / 2; ++cp) steps_int8(acc, w_tile, a_tile, wrow, cp, lane);
    } else if constexpr (W == Fmt::int4) {
      const int g = lane >> 2;
#pragma unroll
      for (int grp = 0; grp < Loader::kGroups; ++grp) {
        u32 s2[kMT][2], nzs2[kMT][2];
#pragma unroll
        for (int i = 0; i < kMT; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int row = wrow + 16 * i + g + 8 * e;
            const dev::U32x2 v = ld_shared_8(st + Loader::kSzOffset + (row * Loader::kGroups + grp) * 8);
            int4_group_constants<A>(__uint_as_float(v.x), __uint_as_float(v.y), s2[i][e], nzs2[i][e]);
          }
        // A group is 128 codes = 4 chunks = 2 chunk pairs.
#pragma unroll
        for (int q = 0; q < 2; ++q) steps_int4(acc, w_tile, a_tile, wrow, 2 * grp + q, s2, nzs2, lane);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kWChunks / 2; ++s) step_16bit(acc, w_tile, a_tile, wrow, s, lane);
    }
  }

 public:
  static __device__ void run(const LinearParams& p, char* smem) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    int k0, k_end;
    split_range<K>(p, k0, k_end);
    const Loader ld(p, n0, m0, k0, k_end);
    const u32 sbase = dev::smem_addr(smem);
    const int wrow = warp * (BN / WARPS);

    Acc acc;
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    run_pipeline<STAGES>(ld, p, sbase, tid, [&](u32 st) { compute(acc, st, wrow, lane); });

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const int n = n0 + wrow + 16 * i + g, m = m0 + 8 * j + 2 * t;
        Epi::put(p, m, n, acc[i][j][0]);
        Epi::put(p, m + 1, n, acc[i][j][1]);
        Epi::put(p, m, n + 8, acc[i][j][2]);
        Epi::put(p, m + 1, n + 8, acc[i][j][3]);
      }
    Epi::template reduce_splits<BM, BN, kThreads>(p, m0, n0);
  }
};

}  // namespace qattn::linear
