// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// FlashQ's products: a chunk is one 64-token block, its codes decoded through the block's
// parameter table.
  // ---- FlashQ (KV == flashq): a chunk is one 64-token block of K and one of V (kv_layout.h), computed
  // on in steps of BN tokens; KB / VB are the head's bit widths (2 or 4; run() dispatches on them). The
  // codes decode to the block's INT8 values s_c * code + m_c (exact fp16 integers) through the block's
  // parameter table (flashq_dequant.cuh); the blocks' alphas scale S (K) and fold into P (V). Blocks
  // hold whole blocks of valid tokens, and the new tokens are in the INT8 buffer (decoded by the int8
  // kernel), so nothing here is masked.
  static constexpr int kFqStage = kv::flashq_block_bytes(4, D);   // the K (or V) area of a stage

  // Channel of Q that A-fragment slot `slot` of k-step s holds for quad position t, the channel the
  // lane's B fragment decodes from a KB-bit code row: int4 words give (c_k, c_k+4), int2 words (c_k, c_k+8).
  template <int KB>
  static __device__ __forceinline__ constexpr int fq_q_channel(int s, int t, int slot) {
    if constexpr (KB == 4) {
      constexpr int kNibble[4] = {0, 4, 1, 5};
      return 32 * (s / 2) + 8 * t + 2 * (s % 2) + kNibble[slot];
    } else {
      constexpr int kCrumb[4] = {0, 8, 1, 9};
      return 64 * (s / 4) + 16 * t + 2 * (s % 4) + kCrumb[slot];
    }
  }


  // S = Q K^T for block tokens [r0, r0 + BN), times scale_log2 * alpha_k. Steps outer, tokens inner, so
  // each step's (s, m) pairs are fetched once.
  template <int KB>
  static __device__ __forceinline__ void fq_qk_product(float (&s)[kMT][kNT][4], const u32 (&qa)[kMT][kSteps][4],
                                                       const char* block, const u32* table, int r0, float scale_log2,
                                                       int lane) {
    constexpr int kCodeRow = kv::flashq_code_row_bytes(KB, D);
    const char* codes = block + kv::flashq_codes_offset(D);
    const int g = lane / 4, t = lane % 4;
    fill_scores(s, 0.f);
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      u32 sc[2], mc[2];
      dev::flashq_pair_params(table, fq_q_channel<KB>(st, t, 0), fq_q_channel<KB>(st, t, 1), sc[0], mc[0]);
      dev::flashq_pair_params(table, fq_q_channel<KB>(st, t, 2), fq_q_channel<KB>(st, t, 3), sc[1], mc[1]);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const char* row = codes + (r0 + nt * 8 + g) * kCodeRow;
        u32 bk[2];
        if constexpr (KB == 4) {
          const u32 w = load<u32>(row + (4 * (st / 2) + t) * 4);
          bk[0] = dev::int4_pair(w, 2 * (st % 2));
          bk[1] = dev::int4_pair(w, 2 * (st % 2) + 1);
        } else {
          const u32 w = load<u32>(row + (4 * (st / 4) + t) * 4);
          bk[0] = dev::int2_pair(w, 2 * (st % 4));
          bk[1] = dev::int2_pair(w, 2 * (st % 4) + 1);
        }
        bk[0] = dev::hfma2(bk[0], sc[0], mc[0]);
        bk[1] = dev::hfma2(bk[1], sc[1], mc[1]);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(s[mt][nt], qa[mt][st], bk);
      }
    }
    scale_scores(s, scale_log2 * dev::flashq_alpha(block));
  }

  // O += P V for block tokens [r0, r0 + BN) (P already times alpha_v). Lane g reads, per token, the
  // 8 channels [J * 64 + g * 8, +8) of its tokens' code rows (a 32-bit word of int4, 16 bits of int2),
  // the layout of pv_product_quant's int4 path, so column_channel() maps the output back the same way.
  template <int VB>
  static __device__ __forceinline__ void fq_pv_product(const float (&s)[kMT][kNT][4], Softmax& st, const char* block,
                                                       const u32* table, int r0, int lane) {
    constexpr int kCodeRow = kv::flashq_code_row_bytes(VB, D);
    const char* codes = block + kv::flashq_codes_offset(D);
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int J = 0; J < D / 64; ++J) {
      u32 sd[8], md[8];   // (s, s) and (m, m) of the lane's 8 channels
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const u32 e = table[J * 64 + g * 8 + j];
        sd[j] = dev::dup_low_half(e);
        md[j] = dev::dup_high_half(e);
      }
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk) {
        u32 pa[kMT][4];
        p_fragments(s, kk, pa);
        const int r[4] = {r0 + 16 * kk + 2 * t, r0 + 16 * kk + 2 * t + 1, r0 + 16 * kk + 2 * t + 8,
                          r0 + 16 * kk + 2 * t + 9};
        u32 w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (VB == 4) w[e] = load<u32>(codes + r[e] * kCodeRow + 4 * (J * 8 + g));
          else w[e] = load<u16>(codes + r[e] * kCodeRow + 2 * (J * 8 + g));
        }
        u32 bv[8][2];   // [channel j][b0 | b1]
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const u32 a = w[2 * half], c = w[2 * half + 1];
#pragma unroll
          for (int k = 0; k < VB; ++k) {   // byte k of a and c: channels 8k/VB .. of both tokens
            const u32 y = dev::prmt(a, c, 0x4400u + 0x1111u * k);   // [a.bk, a.bk, c.bk, c.bk]
            if constexpr (VB == 4) {
              bv[2 * k][half] = dev::hsub2((y & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
              bv[2 * k + 1][half] = dev::hsub2(((y >> 4) & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
            } else {
#pragma unroll
              for (int i = 0; i < 4; ++i)
                bv[4 * k + i][half] = dev::hsub2(((y >> (2 * i)) & 0x00030003u) | dev::kHalf2_1024, dev::kHalf2_1024);
            }
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) bv[j][half] = dev::hfma2(bv[j][half], sd[j], md[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(st.o[mt][J * 8 + j], pa[mt], bv[j]);
      }
    }
  }
