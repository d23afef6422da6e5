// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// Q and K: the Q fragments, K fragments decoded from the raw cache rows, S = Q K^T with the token
// scales, and the causal mask.
  // Channel of Q that A-fragment slot `slot` (a0.lo, a0.hi, a2.lo, a2.hi) of k-step `s` holds for a
  // lane at quad position t: the channel the same lane's B fragment decodes from the K row.
  static __device__ __forceinline__ constexpr int q_channel(int s, int t, int slot) {
    if constexpr (KV == Fmt::int4) {
      constexpr int kNibble[4] = {0, 4, 1, 5};
      return 32 * (s / 2) + 8 * t + 2 * (s % 2) + kNibble[slot];
    } else {
      return 16 * s + 4 * t + slot;
    }
  }

  // B fragment of k-step s for token row r of the chunk (starting at smem address `row`), lane quad
  // position t.
  static __device__ __forceinline__ void k_fragment(const char* row, int r, int s, int t, u32 (&bk)[2]) {
    if constexpr (KV == Fmt::int4) {
      const u32 w = load<u32>(row + kHdr + (4 * (s / 2) + t) * 4);
      const int k0 = 2 * (s % 2);
      bk[0] = kSubnormalInt4 ? dev::int4_pair_subnormal(w, k0) : dev::int4_pair(w, k0);
      bk[1] = kSubnormalInt4 ? dev::int4_pair_subnormal(w, k0 + 1) : dev::int4_pair(w, k0 + 1);
      if constexpr (!kFoldK) {
        const u32 ss = load<u32>(row + 4 * ((32 * (s / 2) + 8 * t) / kGroupChannels));
        const u32 scale = dev::dup_low_half(ss), shift = dev::dup_high_half(ss);
        bk[0] = dev::hfma2(bk[0], scale, shift);
        bk[1] = dev::hfma2(bk[1], scale, shift);
      }
    } else if constexpr (KV == Fmt::int8) {
      dev::int8x4_to_half2(load<u32>(row + kHdr + (4 * s + t) * 4), bk[0], bk[1]);
    } else if constexpr (KV == Fmt::fp8e4m3) {   // 2^-8 x the codes' values; the head scale folds in later
      dev::e4m3x4_to_half2(load<u32>(row + (4 * s + t) * 4), bk[0], bk[1]);
    } else {
      // Row r of a swizzled tile starts at r * kRow; its chunk c sits at c ^ (r % 8).
      const dev::U32x2 v = load<dev::U32x2>(row + ((2 * s + t / 2) ^ (r & 7)) * 16 + (t % 2) * 8);
      bk[0] = v.x;
      bk[1] = v.y;
    }
  }

  // Every score register set to v, or multiplied by f.
  static __device__ __forceinline__ void fill_scores(float (&s)[kMT][kNT][4], float v) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = v;
  }
  static __device__ __forceinline__ void scale_scores(float (&s)[kMT][kNT][4], float f) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] *= f;
  }

  // S = Q K^T for one chunk, times scale_log2 = softmax_scale * log2 e (and the int8 token scales) in
  // fp32: Q enters the product exactly as given, no second rounding of a pre-scaled copy.
  // live: the 8-row groups (2 mt + half) that hold query rows (run_rows); the others' scores are left
  // unscaled, and softmax_update and fold_v_scales skip them too.
  static __device__ __forceinline__ void qk_product(float (&s)[kMT][kNT][4], const u32 (&qa)[kMT][kSteps][4],
                                                    const char* k_tile, float scale_log2, const float (&q_sum)[kMT][2],
                                                    int lane, int live) {
    const int g = lane / 4, t = lane % 4;
    fill_scores(s, 0.f);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int r = nt * 8 + g;
      const char* row = k_tile + r * kRow;
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        u32 bk[2];
        k_fragment(row, r, st, t, bk);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(s[mt][nt], qa[mt][st], bk);
      }
      // Scores of tokens nt*8 + 2t + e (e = 0, 1) for rows g and g + 8 of each m tile.
      const float sc0 = kSubnormalInt4 ? scale_log2 * dev::kInt4Subnormal : scale_log2;
      float sc[2] = {sc0, sc0}, sh[2] = {0.f, 0.f};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const char* hdr = k_tile + (nt * 8 + 2 * t + e) * kRow;
        if constexpr (KV == Fmt::int8) sc[e] *= load<float>(hdr);
        if constexpr (kFoldK) {
          float scale, shift;
          dev::unpack_half2(load<u32>(hdr), scale, shift);
          sc[e] *= scale;
          sh[e] = shift * scale_log2;
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (2 * mt + half >= live) continue;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][nt][half * 2 + e];
            x = kFoldK ? fmaf(x, sc[e], sh[e] * q_sum[mt][half]) : x * sc[e];
          }
        }
    }
  }

  // Scores of tokens a row may not see become -inf (a select, so garbage or NaN in unused rows of a
  // straddling group never survives).
  static __device__ __forceinline__ void apply_mask(float (&s)[kMT][kNT][4], int t0, int len, int row0, int gqa,
                                                    int q_len, int lane) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        const int limit = CAUSAL ? min(len, len - q_len + 1 + row / gqa) : len;   // tokens < limit are seen
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (t0 + nt * 8 + (lane % 4) * 2 + e >= limit) s[mt][nt][half * 2 + e] = dev::neg_inf();
      }
  }

  // The A fragments of this CTA's query rows, in the channel order of k_fragment.
  // q_sum: per row, the sum of the (rounded) Q elements, for the factored-out int4 K shift.
  // KB: flashq's K bit width (its own channel order), 0 otherwise.
  template <int KB = 0>
  static __device__ __forceinline__ void load_q(const DecodeParams& p, u32 (&qa)[kMT][kSteps][4],
                                                float (&q_sum)[kMT][2], int b, int h, int row0, int rows, int lane) {
    const int gqa = p.heads_q / p.heads_kv;
    const int t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        const bool valid = row < rows;
        float sum = 0.f;
        const u16* q = static_cast<const u16*>(p.q.ptr) + (long long)b * p.q.sb +
                       (long long)(h * gqa + (valid ? row % gqa : 0)) * p.q.sh + (long long)(valid ? row / gqa : 0) * p.q.ss;
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
          float x[4];
#pragma unroll
          for (int slot = 0; slot < 4; ++slot)
            x[slot] = valid ? dev::to_float<OUT>(q[KB ? fq_q_channel<KB>(st, t, slot) : q_channel(st, t, slot)]) : 0.f;
          // Subnormal int4 K: slots 2 and 3 meet the odd pairs (16 times their codes), so 1/16 of Q.
          const float odd = KB == 0 && kSubnormalInt4 ? 0.0625f : 1.f;
          qa[mt][st][half] = dev::pack2<kMma>(x[0], x[1]);
          qa[mt][st][2 + half] = dev::pack2<kMma>(x[2] * odd, x[3] * odd);
          float lo, hi;
          dev::unpack2<kMma>(qa[mt][st][half], lo, hi);
          sum += lo + hi;
          dev::unpack2<kMma>(qa[mt][st][2 + half], lo, hi);
          sum += (lo + hi) / odd;   // the sum of the Q the products use
        }
        q_sum[mt][half] = dev::quad_sum(sum);
      }
  }
