// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The consumer's second product: P from the logits in the P·V format (u8 P̂, fp16 / bf16 P or e4m3 P̃),
// the row sums, and O += P·V (mma.sync or wgmma).
  // P's k32 A fragments (int8 P̂ or fp8 P̃), kept from one tile's softmax to the next tile's issue.
  using PFrag = u32[kMT][kPVSteps][4];
  // pv=fp16 and pv=fp8e4m3: P = pscale · 2^(L - R) in registers, the exact row sums (fp32, before any
  // rounding), and O += P·V with the V tile at vtile.
  //   fp16: P rounded to OUT (fp16 or bf16: the type of V, which the loader copies as is), k16 A
  //         fragments straight from the S accumulators (blocks 2i, 2i + 1); V fragments by ldmatrix.trans
  //         from the row-major tile (rows in S column order, see load_v_half); mma m16n8k16 into fp32
  //         or, with accum=fp16, half2 O.
  //   fp8:  P̃ = 448 · 2^(L - R) to e4m3 (RNE, saturating), packed exactly like the int8 P̂ bytes (same
  //         k32 A fragment), V^T e4m3 codes from the same swizzled tile as int8 V̂^T; mma m16n8k32
  //         .e4m3 into fp32 O (accum=fp32: the hardware's ~FP22 accumulate over the whole row), or into
  //         a zeroed accumulator per (8 channels, KV tile) added to O after the tile (two_level).
  // ISSUE = false (the warp-specialized loop): P̃'s fragments into *keep, and no product (issue_pv).
  template <int NPS = kPVSteps, bool ISSUE = true>
  static __device__ __forceinline__ void softmax_pv_float(State& st, const Logits& u, const RowFac& fac, u32 vtile,
                                                          PFrag* keep = nullptr) {
    const int lane = threadIdx.x & 31;
    constexpr float kLog2Scale = kHalfV ? 0.f : kLog2Fp8PScale;
    float y[kMT][kSN][4];   // P (before rounding), in S accumulator order
    u32 ph[kHalfV ? kMT : 1][BN / 16][4];   // fp16: P's k16 A fragments (S blocks 2ks, 2ks + 1 as they are)
    u32 pf[kHalfV ? 1 : kMT][kPVSteps][4];  // fp8: P̃'s k32 A fragments
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float pbias[2], lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)   // R = -inf only while every key so far is masked (u = -inf)
        pbias[hf] = st.r[mt][hf] == dev::neg_inf() ? 0.f : kLog2Scale - st.r[mt][hf];
#pragma unroll
      for (int j = 0; j < 4 * NPS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          y[mt][j][e] = dev::exp2_approx(fmaf(u[mt][j][e], KBLOCK ? fac[mt][e >> 1][j / 4] : st.qs[mt][e >> 1], pbias[e >> 1]));
          lsum[e >> 1] += y[mt][j][e];
        }
      st.l_x[mt][0] += lsum[0];
      st.l_x[mt][1] += lsum[1];
      if constexpr (kHalfV) {   // packed at once, so y dies here (fewer live registers than y)
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
          const float(&a)[4] = y[mt][2 * ks];
          const float(&b)[4] = y[mt][2 * ks + 1];
          ph[mt][ks][0] = dev::pack2<OUT>(a[0], a[1]);
          ph[mt][ks][1] = dev::pack2<OUT>(a[2], a[3]);
          ph[mt][ks][2] = dev::pack2<OUT>(b[0], b[1]);
          ph[mt][ks][3] = dev::pack2<OUT>(b[2], b[3]);
        }
      } else {
        // fp8: keys 4t4 .. +3 = (j0 e0, j0 e1, j1 e0, j1 e1) for rows g / g + 8, then blocks j2, j3:
        // the int8 P̂ byte order (the same k32 A fragment).
#pragma unroll
        for (int ks = 0; ks < NPS; ++ks) {
          const float(&j0)[4] = y[mt][4 * ks];
          const float(&j1)[4] = y[mt][4 * ks + 1];
          const float(&j2)[4] = y[mt][4 * ks + 2];
          const float(&j3)[4] = y[mt][4 * ks + 3];
          pf[mt][ks][0] = dev::e4m3x4(j0[0], j0[1], j1[0], j1[1]);
          pf[mt][ks][1] = dev::e4m3x4(j0[2], j0[3], j1[2], j1[3]);
          pf[mt][ks][2] = dev::e4m3x4(j2[0], j2[1], j3[0], j3[1]);
          pf[mt][ks][3] = dev::e4m3x4(j2[2], j2[3], j3[2], j3[3]);
        }
      }
    }
    if constexpr (!ISSUE) {
      keep_fragments(*keep, pf);
      return;
    }
    if constexpr (kHalfV) {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
          u32 vb[4];
          const int row = 16 * ks + (lane & 7) + (((lane >> 3) & 1) << 3), chunk = 2 * c + (lane >> 4);
          dev::ldmatrix_x4_trans(vb, vtile + dev::swizzled_offset<kVHChunks>(row, chunk));
          const u32 b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (kHalfO) {
              dev::mma_m16n8k16_f16_f16(st.o[mt][2 * c], ph[mt][ks], b0);
              dev::mma_m16n8k16_f16_f16(st.o[mt][2 * c + 1], ph[mt][ks], b1);
            } else {
              dev::mma_m16n8k16_f32<OUT>(st.o[mt][2 * c], ph[mt][ks], b0);
              dev::mma_m16n8k16_f32<OUT>(st.o[mt][2 * c + 1], ph[mt][ks], b1);
            }
          }
        }
      }
    } else if constexpr (WG) {
      pv_fp8_wgmma<NPS>(st, pf, vtile);
    } else {
      // One n8 block of O at a time (x2 V loads): two_level's fresh accumulator is then 4 registers per
      // m16 tile (and this order also keeps fp32 at d = 256 on sm_90a from spilling, per ptxas's report).
#pragma unroll
      for (int n = 0; n < kON; ++n) {
        float t[kMT][4];
        if constexpr (ACC == Accum::two_level) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) t[mt][e] = 0.f;
        }
#pragma unroll
        for (int ks = 0; ks < NPS; ++ks) {
          u32 vb[2];
          const int row = 8 * n + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          dev::ldmatrix_x2(vb, vtile + row * BN + int8::swizzle<kNChunks>(row, chunk) * 16);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (ACC == Accum::two_level) dev::mma_m16n8k32_e4m3_f32(t[mt], pf[mt][ks], vb);
            else dev::mma_m16n8k32_e4m3_f32(st.o[mt][n], pf[mt][ks], vb);
          }
        }
        if constexpr (ACC == Accum::two_level) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[mt][n][e] += t[mt][e];
        }
      }
    }
  }

  // fp8 P·V on wgmma (sm_90a: native e4m3 tensor cores, where mma.sync .e4m3 becomes FP16 conversions
  // and HMMA). P̃ from registers (pf: the same k32 A fragment as int8 P̂), V^T from the swizzled tile.
  //   accum=fp32       straight into O. Hopper's FP8 wgmma accumulates with reduced precision (the
  //                    SageAttention2 / DeepSeek-V3 observation), so a long row's O loses low bits.
  //   accum=two_level  a fresh accumulator per KV tile (SCALE_D = 0 on the first k-step), waited for
  //                    and added to the fp32 O: the reduced-precision sums cover bn keys only. At d = 256
  //                    the fresh sum is taken in two halves of 128 columns (128 more registers would spill).
  static constexpr int kTwoLevelCols = D == 256 ? 128 : D;
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void pv_fp8_wgmma(State& st, const u32 (&pf)[1][kPVSteps][4], u32 vtile) {
    const dev::u64 vd = dev::wgmma_desc(vtile, BN);
    if constexpr (ACC == Accum::two_level) {
#pragma unroll
      for (int c = 0; c < D / kTwoLevelCols; ++c) {
        float t[kTwoLevelCols / 8][4];
        const dev::u64 vc = vd + static_cast<dev::u64>((c * kTwoLevelCols * BN) >> 4);   // V^T rows BN bytes apart
        dev::wgmma_fence();
        dev::wgmma_e4m3_rs<kTwoLevelCols, 0>(t, pf[0][0], vc, BN);
#pragma unroll
        for (int ps = 1; ps < NPS; ++ps) dev::wgmma_e4m3_rs<kTwoLevelCols>(t, pf[0][ps], vc + 2 * ps, BN);
        dev::wgmma_commit();
        dev::wgmma_wait<0>();
        dev::fence_operands(t);
#pragma unroll
        for (int n = 0; n < kTwoLevelCols / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) st.o[0][c * (kTwoLevelCols / 8) + n][e] += t[n][e];
      }
    } else {
      dev::fence_operands(st.o[0]);
      dev::wgmma_fence();
#pragma unroll
      for (int ps = 0; ps < NPS; ++ps) dev::wgmma_e4m3_rs<D>(st.o[0], pf[0][ps], vd + 2 * ps, BN);
      dev::wgmma_commit();   // the caller waits
    }
  }

  // O's two values (columns 2t4, 2t4 + 1) of row g + 8hf in n8 block n of m16 tile mt, as floats.
  static __device__ __forceinline__ float2 o_pair(const State& st, int mt, int n, int hf) {
    if constexpr (kHalfO) {
      float lo, hi;
      dev::unpack_half2(st.o[mt][n][hf], lo, hi);
      return make_float2(lo, hi);
    } else if constexpr (kIntPV) {
      return make_float2(int8::i2f(st.o[mt][n][2 * hf]), int8::i2f(st.o[mt][n][2 * hf + 1]));
    } else {
      return make_float2(st.o[mt][n][2 * hf], st.o[mt][n][2 * hf + 1]);
    }
  }

  // P from the logits and O += P·V with the V tile at vtile, by P·V format.
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void softmax_pv(State& st, const Logits& u, const RowFac& fac, u32 vtile) {
    static_assert(NPS == kPVSteps || (WG && !kHalfV), "prefill_int8: a half KV tile exists in the wgmma form only");
    if constexpr (kIntPV) softmax_pv_int8<NPS>(st, u, fac, vtile);
    else softmax_pv_float<NPS>(st, u, fac, vtile);
  }

  // P̂ = round(kPScale · 2^(L - R)) packed straight into the A fragments of P·V, the row sums (the exact
  // one always; Σ P̂ where it is l), and O += P̂·V̂ with the V^T tile at vtile.
  // ISSUE = false (the warp-specialized loop): P̂'s fragments into *keep, and no product (issue_pv).
  template <int NPS = kPVSteps, bool ISSUE = true>
  static __device__ __forceinline__ void softmax_pv_int8(State& st, const Logits& u, const RowFac& fac, u32 vtile,
                                                         PFrag* keep = nullptr) {
    const int lane = threadIdx.x & 31;
    u32 pf[kMT][kPVSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float pbias[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)   // R = -inf only while every key so far is masked (u = -inf)
        pbias[hf] = st.r[mt][hf] == dev::neg_inf() ? 0.f : kLog2PScale - st.r[mt][hf];
      // The exact sums add the fp16 copies of y that the rounding makes anyway: one HADD2 per two
      // probabilities (each fp16 lane sums bn / 8 values below 255: relative error <= ~1e-3).
      u32 hsum[2] = {0u, 0u};
#pragma unroll
      for (int ps = 0; ps < NPS; ++ps) {
        float y[4][4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            y[jj][e] = dev::exp2_approx(
                fmaf(u[mt][4 * ps + jj][e], KBLOCK ? fac[mt][e >> 1][ps] : st.qs[mt][e >> 1], pbias[e >> 1]));
        // h[jj][hf]: (y of row g + 8hf, key pair of block jj) in fp16; the A fragment wants
        // reg0 = row g, keys 4t4..+3 = (j0 e0, j0 e1, j1 e0, j1 e1); reg1 = row g + 8;
        // reg2 / reg3 = the same for blocks j2, j3 (keys 16 + 4t4..+3).
        u32 h[4][2];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            h[jj][hf] = dev::pack_half2(y[jj][2 * hf], y[jj][2 * hf + 1]);
            hsum[hf] = int8::hadd2(hsum[hf], h[jj][hf]);
          }
        pf[mt][ps][0] = int8::pack_even_bytes(int8::round_f16x2(h[0][0]), int8::round_f16x2(h[1][0]));
        pf[mt][ps][1] = int8::pack_even_bytes(int8::round_f16x2(h[0][1]), int8::round_f16x2(h[1][1]));
        pf[mt][ps][2] = int8::pack_even_bytes(int8::round_f16x2(h[2][0]), int8::round_f16x2(h[3][0]));
        pf[mt][ps][3] = int8::pack_even_bytes(int8::round_f16x2(h[2][1]), int8::round_f16x2(h[3][1]));
      }
      if constexpr (!kExactSum) {
#pragma unroll
        for (int ps = 0; ps < NPS; ++ps) {
          st.l_q[mt][0] = int8::byte_sum(pf[mt][ps][0], int8::byte_sum(pf[mt][ps][2], st.l_q[mt][0]));
          st.l_q[mt][1] = int8::byte_sum(pf[mt][ps][1], int8::byte_sum(pf[mt][ps][3], st.l_q[mt][1]));
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float lo, hi;
        dev::unpack_half2(hsum[hf], lo, hi);
        st.l_x[mt][hf] += lo + hi;
      }
    }
    if constexpr (!ISSUE) {
      keep_fragments(*keep, pf);
    } else if constexpr (WG) {
      pv_int8_wgmma<NPS>(st, pf, vtile);
    } else {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
#pragma unroll
        for (int ps = 0; ps < NPS; ++ps) {
          u32 vb[4];
          const int row = 16 * c + (lane & 7) + ((lane >> 4) << 3);
          const int chunk = 2 * ps + ((lane >> 3) & 1);
          dev::ldmatrix_x4(vb, vtile + row * BN + int8::swizzle<kNChunks>(row, chunk) * 16);
          const u32 b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            dev::mma_m16n8k32_u8s8_s32(st.o[mt][2 * c], pf[mt][ps], b0);
            dev::mma_m16n8k32_u8s8_s32(st.o[mt][2 * c + 1], pf[mt][ps], b1);
          }
        }
      }
    }
  }

  static __device__ __forceinline__ void keep_fragments(PFrag& keep, const PFrag& pf) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ps = 0; ps < kPVSteps; ++ps)
#pragma unroll
        for (int i = 0; i < 4; ++i) keep[mt][ps][i] = pf[mt][ps][i];
  }

  // int8 P·V on wgmma: O += P̂·V̂ with the V^T tile at vtile (committed; the caller waits).
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void pv_int8_wgmma(State& st, const u32 (&pf)[1][kPVSteps][4], u32 vtile) {
    const dev::u64 vd = dev::wgmma_desc(vtile, BN);
    dev::fence_operands(st.o[0]);
    dev::wgmma_fence();
#pragma unroll
    for (int ps = 0; ps < NPS; ++ps) dev::wgmma_u8s8_rs<D>(st.o[0], pf[0][ps], vd + 2 * ps, BN);
    dev::wgmma_commit();   // the caller waits
  }
