// Tiled GEMM for many tokens on tensor cores (the `gemm` dataflow, FlashDecoding++'s ImplC).
//
// A CTA computes a BM x BN tile of C (tokens x channels) with mma.m16n8k16: A rows are the 16-row
// operand, W rows (channels) the 8-wide one, so C fragments come out row-major in n and pairs of
// adjacent outputs store as one word. Warps form a 2 x (WARPS / 2) grid of kWM x kWN warp tiles
// (kMT m16 x kNT n8 fragments). K is walked through the STAGES-deep cp.async ring of stage_loader.cuh;
// split-K over grid z as in every linear kernel (split_k_epilogue.cuh).
//
// Fragments (lane = 4g + t; mma.cuh for the m16n8k16 layouts):
//   A, 16-bit W   ldmatrix.x4 of rows 16i + 0..7 / 8..15 at chunks 2s / 2s + 1 (the A operand as stored).
//   W, 16-bit     ldmatrix.x4 of two n8 fragments' rows at chunks 2s, 2s + 1: b[0], b[1] of each.
//   W, int8/int4  ldmatrix.x4 of four n8 fragments' rows at one chunk of codes (4 int8 or 8 int4 codes of
//                 row g per lane), decoded in registers in the k order of weight_tile.cuh; the A operand
//                 then takes the matching consecutive elements of rows g and g + 8 by 8-byte (int8) or
//                 16-byte (int4, two steps) shared loads.
//   C             d[0..1] = row g, channels 2t, 2t + 1; d[2..3] = row g + 8.
// The sm_90a warpgroup form (WGMMA = true) is GemmWgmma (gemm_wgmma.cuh), selected below.
#pragma once
#include "qattn/abi.h"
#include "qattn/common/common.cuh"
#include "qattn/linear/linear_shape.h"
#include "qattn/linear/split_k_epilogue.cuh"
#include "qattn/linear/stage_loader.cuh"
#include "qattn/linear/weight_tile.cuh"
#include "qattn/linear/gemm_wgmma.cuh"

namespace qattn::linear {

template <Fmt A, Fmt W, Fmt OUT, int N, int K, bool BIAS, int BM, int BN, int WARPS, int STAGES, bool WGMMA>
struct Gemm {
  static_assert(linear_tiling_problem(Dataflow::gemm, A, W, BM, BN, WARPS, STAGES, WGMMA) == nullptr,
                "linear gemm: unsupported formats or tiling (linear_shape.h)");
  static_assert(K % (128 / weight_bits(W)) == 0 && (W != Fmt::int4 || K % kLinearInt4Group == 0),
                "linear gemm: K must be a multiple of 8 (16-bit W), 16 (int8) or 128 (int4)");

  static constexpr int kThreads = WARPS * 32;

 private:
  using u32 = dev::u32;
  using Loader = StageLoader<Dataflow::gemm, W, K, BM, BN, kThreads>;
  using Epi = Epilogue<W, OUT, BIAS>;

  static constexpr int kWM = gemm_warp_m(BM);
  static constexpr int kWN = gemm_warp_n(BN, WARPS);
  static constexpr int kMT = kWM / 16;
  static constexpr int kNT = kWN / 8;
  static constexpr int kWChunks = Loader::kWChunks;
  static constexpr int kAChunks = Loader::kAChunks;
  static_assert(kNT % 4 == 0, "linear gemm: warp tiles are 32 or 64 channels wide");

  using Acc = float[kMT][kNT][4];

  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    dev::mma_m16n8k16_f32<A>(d, a, b);
  }

  // 16-bit W: one k16 step (chunks 2s, 2s + 1).
  static __device__ __forceinline__ void step_16bit(Acc& acc, u32 a_tile, u32 w_tile, int arow, int wcol, int s,
                                                    int lane) {
    u32 b[kNT][2];
#pragma unroll
    for (int jj = 0; jj < kNT / 2; ++jj) {
      u32 r[4];
      const int row = wcol + 16 * jj + (lane & 7) + 8 * (lane >> 4);
      dev::ldmatrix_x4(r, w_tile + dev::swizzled_offset<kWChunks>(row, 2 * s + ((lane >> 3) & 1)));
      b[2 * jj][0] = r[0], b[2 * jj][1] = r[1], b[2 * jj + 1][0] = r[2], b[2 * jj + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      u32 a[4];
      const int row = arow + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1);
      dev::ldmatrix_x4(a, a_tile + dev::swizzled_offset<kAChunks>(row, 2 * s + (lane >> 4)));
#pragma unroll
      for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[j]);
    }
  }

  // Quantized W: the codes of row g of n8 fragments 4q .. 4q + 3 at chunk c (r[q][e]: fragment 4q + e).
  static __device__ __forceinline__ void load_codes(u32 (&r)[kNT], u32 w_tile, int wcol, int c, int lane) {
#pragma unroll
    for (int q = 0; q < kNT / 4; ++q) {
      u32 x[4];
      dev::ldmatrix_x4(x, w_tile + dev::swizzled_offset<kWChunks>(wcol + 32 * q + lane, c));
#pragma unroll
      for (int e = 0; e < 4; ++e) r[4 * q + e] = x[e];
    }
  }

  // int8: chunk c (16 codes, one k16 step).
  static __device__ __forceinline__ void step_int8(Acc& acc, u32 a_tile, u32 w_tile, int arow, int wcol, int c,
                                                   int lane) {
    const int g = lane >> 2, t = lane & 3;
    u32 r[kNT], b[kNT][2];
    load_codes(r, w_tile, wcol, c, lane);
#pragma unroll
    for (int j = 0; j < kNT; ++j) int8x4_to_pairs<A>(r[j], b[j][0], b[j][1]);
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      // Elements 16c + 4t .. + 3 of rows g and g + 8: bytes 32c + 8t of each row.
      u32 a[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = arow + 16 * i + g + 8 * h;
        const dev::U32x2 v = ld_shared_8(a_tile + dev::swizzled_offset<kAChunks>(row, 2 * c + (t >> 1)) + 8 * (t & 1));
        a[h] = v.x, a[2 + h] = v.y;
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[j]);
    }
  }

  // int4: chunk c (32 codes, two k16 steps); sc / sh: (scale, shift) of channel g of every n8 fragment.
  static __device__ __forceinline__ void steps_int4(Acc& acc, u32 a_tile, u32 w_tile, int arow, int wcol, int c,
                                                    const float (&sc)[kNT], const float (&sh)[kNT], int lane) {
    const int g = lane >> 2, t = lane & 3;
    u32 r[kNT];
    load_codes(r, w_tile, wcol, c, lane);
    // Elements 32c + 8t .. + 7 of rows g and g + 8: chunk 4c + t of each; words 2s, 2s + 1 feed step s.
    u32 av[kMT][2][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const dev::U32x4 v = dev::ld_shared_16(a_tile + dev::swizzled_offset<kAChunks>(arow + 16 * i + g + 8 * h, 4 * c + t));
        av[i][h][0] = v.x, av[i][h][1] = v.y, av[i][h][2] = v.z, av[i][h][3] = v.w;
      }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      u32 b[kNT][2];
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (s == 0) int4x4_to_pairs<A, 0>(r[j], sc[j], sh[j], b[j][0], b[j][1]);
        else int4x4_to_pairs<A, 2>(r[j], sc[j], sh[j], b[j][0], b[j][1]);
      }
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        const u32 a[4] = {av[i][0][2 * s], av[i][1][2 * s], av[i][0][2 * s + 1], av[i][1][2 * s + 1]};
#pragma unroll
        for (int j = 0; j < kNT; ++j) mma(acc[i][j], a, b[j]);
      }
    }
  }

  static __device__ __forceinline__ void compute(Acc& acc, u32 st, int arow, int wcol, int lane) {
    const u32 w_tile = st + Loader::kWOffset, a_tile = st + Loader::kAOffset;
    if constexpr (W == Fmt::int8) {
#pragma unroll
      for (int c = 0; c < kWChunks; ++c) step_int8(acc, a_tile, w_tile, arow, wcol, c, lane);
    } else if constexpr (W == Fmt::int4) {
      static_assert(Loader::kGroups == 1, "linear gemm: an int4 tile is one group");
      float sc[kNT], sh[kNT];
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const dev::U32x2 v = ld_shared_8(st + Loader::kSzOffset + (wcol + 8 * j + (lane >> 2)) * 8);
        sc[j] = __uint_as_float(v.x);
        sh[j] = int4_shift(sc[j], __uint_as_float(v.y));
      }
#pragma unroll
      for (int c = 0; c < kWChunks; ++c) steps_int4(acc, a_tile, w_tile, arow, wcol, c, sc, sh, lane);
    } else {
#pragma unroll
      for (int s = 0; s < kWChunks / 2; ++s) step_16bit(acc, a_tile, w_tile, arow, wcol, s, lane);
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
    const int arow = (warp & 1) * kWM, wcol = (warp >> 1) * kWN;

    Acc acc;
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    run_pipeline<STAGES>(ld, p, sbase, tid, [&](u32 st) { compute(acc, st, arow, wcol, lane); });

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const int m = m0 + arow + 16 * i + g, n = n0 + wcol + 8 * j + 2 * t;
        Epi::put2(p, m, n, acc[i][j][0], acc[i][j][1]);
        Epi::put2(p, m + 8, n, acc[i][j][2], acc[i][j][3]);
      }
    Epi::template reduce_splits<BM, BN, kThreads>(p, m0, n0);
  }
};

// WGMMA = true: the warpgroup form (sm_90a).
template <Fmt A, Fmt W, Fmt OUT, int N, int K, bool BIAS, int BM, int BN, int WARPS, int STAGES>
struct Gemm<A, W, OUT, N, K, BIAS, BM, BN, WARPS, STAGES, true> : GemmWgmma<A, W, OUT, N, K, BIAS, BM, BN, WARPS, STAGES> {};

}  // namespace qattn::linear
