// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// The online softmax of one chunk (exact, sas or unified_max), the V scales folded into P, and
// P as the A fragments of P V.
  // e^x of a score difference given in log2 units (x2 = x * log2 e): ex2 on the SFU, or TurboAttention's
  // SAS (LUT + fp16 cubic, 0 below -6; sas.h) for softmax=sas. The merges of warps and splits stay exact.
  static __device__ __forceinline__ float exp_of_log2(float x2) {
    if constexpr (SMX == SoftmaxMode::sas) return sas::exp(x2 * dev::kLn2);
    else return dev::exp2_approx(x2);
  }

  // Over the live 8-row groups only (qk_product); a dead group's scores become P values of rows that
  // are never written (a row of the products touches its own output row only).
  static __device__ __forceinline__ void softmax_update(float (&s)[kMT][kNT][4], Softmax& st, int live = 2 * kMT) {
    if constexpr (SMX == SoftmaxMode::unified_max) {
      // FlashDecoding++: p = 2^(x2 - phi2) against one constant phi2 and l += p; nothing to rescale, no
      // shuffle. The lane's largest score is kept for the row flags (finish()); masked scores are -inf
      // (p = 0, and they never raise the maximum).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (2 * mt + half >= live) continue;
          float mx = st.m[mt][half], sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][half * 2 + e];
              mx = fmaxf(mx, x);
              x = dev::exp2_approx(x - st.phi2);
              sum += x;
            }
          st.m[mt][half] = mx;
          st.l[mt][half] += sum;
        }
      return;
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (2 * mt + half >= live) continue;
        float mx = st.m[mt][half];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][half * 2], s[mt][nt][half * 2 + 1]));
        mx = dev::quad_max(mx);
        // A row with only masked tokens so far keeps max -inf; subtracting 0 keeps NaN out.
        const float m_use = mx == dev::neg_inf() ? 0.f : mx;
        const float alpha = exp_of_log2(st.m[mt][half] - m_use);
        st.m[mt][half] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          float& s0 = s[mt][nt][half * 2];
          float& s1 = s[mt][nt][half * 2 + 1];
          if constexpr (SMX == SoftmaxMode::sas) {   // two scores per packed fp16 step
            sas::exp2x((s0 - m_use) * dev::kLn2, (s1 - m_use) * dev::kLn2, s0, s1);
          } else {
            s0 = dev::exp2_approx(s0 - m_use);
            s1 = dev::exp2_approx(s1 - m_use);
          }
          sum += s0 + s1;
        }
        st.l[mt][half] = st.l[mt][half] * alpha + sum;
        st.v_shift[mt][half] *= alpha;
        // Past the first chunks the running max rarely rises: skip the O rescale when no row of the
        // warp's (mt, half) rows moved (alpha == 1 exactly: exp2(0)).
        if (__any_sync(0xffffffffu, alpha != 1.f))
#pragma unroll
          for (int c = 0; c < kOC; ++c) {
            st.o[mt][c][half * 2] *= alpha;
            st.o[mt][c][half * 2 + 1] *= alpha;
          }
      }
  }

  // Folds the per-token V scales into P (and sums P * shift for int4) for tokens nt*8 + 2t + e. Rows
  // at or past len carry garbage headers: their P is 0 and their scale and shift are taken as 0.
  static __device__ __forceinline__ void fold_v_scales(float (&s)[kMT][kNT][4], Softmax& st, const char* v_tile,
                                                       int t0, int len, int lane, int live) {
    const int t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = nt * 8 + 2 * t + e;
        const bool valid = t0 + r < len;
        const char* hdr = v_tile + r * kRow;
        float scale = 0.f, shift = 0.f;
        if constexpr (KV == Fmt::int8) scale = load<float>(hdr);
        else dev::unpack_half2(load<u32>(hdr), scale, shift);
        scale = valid ? scale : 0.f;
        shift = valid ? shift : 0.f;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            if (2 * mt + half >= live) continue;
            float& pr = s[mt][nt][half * 2 + e];
            if constexpr (KV == Fmt::int4) st.v_shift[mt][half] = fmaf(pr, shift, st.v_shift[mt][half]);
            pr *= scale;
          }
      }
  }

  // The A fragments of P for k16 step kk: the S accumulators of n tiles 2kk and 2kk + 1 (C layout ==
  // A layout), converted to the product's element type.
  static __device__ __forceinline__ void p_fragments(const float (&s)[kMT][kNT][4], int kk, u32 (&pa)[kMT][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      pa[mt][0] = dev::pack2<kMma>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = dev::pack2<kMma>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = dev::pack2<kMma>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = dev::pack2<kMma>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
  }
