// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The consumer's softmax: logits from S (scales, ΔS, masks), the tile max, and the integer-step reference
// max R with its rescale of O and the row sums.
  // u = S · k_scale (masked keys: -inf) and the tile max of L per row. Returns whether R must rise.
  // QSMOOTH: ds = the staged ΔS · k_scale of the CTA's block means (block_mean_scores), added to u
  // (times the row's dsf) before the max.
  template <bool MASKED, int NPS = kPVSteps>
  static __device__ __forceinline__ bool logits(Logits& u, RowVals& m_tile, RowFac& fac, const Scores& s,
                                                const State& st, const Ctx& cx, const float* kscale, int k0,
                                                const float* ds) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    // Last key each row may see (kv_len - 1, or its causal limit), relative to this thread's first key.
    int last[kMT][2];
    if (MASKED) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int row_last = cx.row0 + 16 * mt + g + 8 * hf + cx.causal_offset;
          last[mt][hf] = (CAUSAL && row_last < cx.kv_len - 1 ? row_last : cx.kv_len - 1) - (k0 + 4 * t4);
        }
    }
    // Thread columns of k-step ps are keys 32ps + 4t4 + 0..3 (blocks j0, j1) and 32ps + 16 + 4t4 + 0..3
    // (blocks j2, j3): two float4 reads of the staged scales. KBLOCK: the step's 32 keys share one scale
    // (K groups of 64 keys, and tiles start at multiples of bn >= 32), which goes into the row factor
    // instead of every score: one multiply per row and step rather than one per score. A step wholly
    // past kv_len reads a zero-filled scale; the clamp keeps -inf · factor at -inf.
    float kstep[kPVSteps];
#pragma unroll
    for (int ps = 0; ps < NPS; ++ps) {
      kstep[ps] = KBLOCK ? fmaxf(kscale[32 * ps], 1e-30f) : 1.f;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) fac[mt][hf][ps] = KBLOCK ? st.qs[mt][hf] * kstep[ps] : 0.f;   // unused without
    }
#pragma unroll
    for (int ps = 0; ps < NPS; ++ps) {
      float4 lo = make_float4(1.f, 1.f, 1.f, 1.f), hi = lo;
      if constexpr (!KBLOCK) {
        lo = *reinterpret_cast<const float4*>(kscale + 32 * ps + 4 * t4);
        hi = *reinterpret_cast<const float4*>(kscale + 32 * ps + 16 + 4 * t4);
      }
      const float ksc[4][2] = {{lo.x, lo.y}, {lo.z, lo.w}, {hi.x, hi.y}, {hi.z, hi.w}};
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        // The same two keys of ΔS, from the row block of each m16 tile (its 16 rows lie in one block);
        // a float2 per block jj rather than float4s per k-step keeps fewer registers live (spills).
        float2 dsk[kMT];
        if constexpr (QSMOOTH) {
          const int warp = threadIdx.x >> 5;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
            dsk[mt] = *reinterpret_cast<const float2*>(ds + ((warp * 16 * kMT + 16 * mt) / kQMeanBlock) * BN + 32 * ps +
                                                       16 * (jj >> 1) + 2 * (jj & 1) + 4 * t4);
        }
        const float kbias[2] = {-int8::kMagic * ksc[jj][0], -int8::kMagic * ksc[jj][1]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x;
            if constexpr (FP8QK)   // fp32 S
              x = KBLOCK ? s[mt][4 * ps + jj][e] : s[mt][4 * ps + jj][e] * ksc[jj][e & 1];
            else if constexpr (KBLOCK)   // S itself (the biased start: its float bits minus the bias, exact)
              x = kRawS ? int8::i2f(s[mt][4 * ps + jj][e]) : __int_as_float(s[mt][4 * ps + jj][e]) - int8::kMagic;
            else
              x = kRawS ? int8::i2f(s[mt][4 * ps + jj][e]) * ksc[jj][e & 1]
                        : fmaf(__int_as_float(s[mt][4 * ps + jj][e]), ksc[jj][e & 1], kbias[e & 1]);
            if constexpr (QSMOOTH) x = fmaf((e & 1) ? dsk[mt].y : dsk[mt].x, st.dsf[mt][e >> 1], x);
            if (MASKED && 32 * ps + 16 * (jj >> 1) + 2 * (jj & 1) + (e & 1) > last[mt][e >> 1]) x = dev::neg_inf();
            u[mt][4 * ps + jj][e] = x;
          }
      }
    }
    bool raise = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx[kSN];   // a tree, not a chain: the max is on the critical path of every tile
#pragma unroll
        for (int j = 0; j < 4 * NPS; ++j) mx[j] = fmaxf(u[mt][j][2 * hf], u[mt][j][2 * hf + 1]);
        // KBLOCK: first within each step (4 blocks), which then takes its K scale, then across steps.
#pragma unroll
        for (int w = 1; w < (KBLOCK ? 4 : 4 * NPS); w *= 2)
#pragma unroll
          for (int j = 0; j + w < 4 * NPS; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        if constexpr (KBLOCK) {
#pragma unroll
          for (int ps = 0; ps < NPS; ++ps) mx[4 * ps] *= kstep[ps];   // > 0: -inf stays -inf
#pragma unroll
          for (int w = 4; w < 4 * NPS; w *= 2)
#pragma unroll
            for (int j = 0; j + w < 4 * NPS; j += 2 * w) mx[j] = fmaxf(mx[j], mx[j + w]);
        }
        m_tile[mt][hf] = dev::quad_max(mx[0]) * st.qs[mt][hf];   // qs > 0: -inf stays -inf
        raise |= m_tile[mt][hf] > st.r[mt][hf];
      }
    // The guards apart from the max test: they rarely apply (cx.check_lq is uniform, false up to ~31k
    // keys), and folded into its expression they cost every tile a chain of selects.
    if (cx.check_lq) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) raise |= long_row_share(st, mt, 0) || long_row_share(st, mt, 1);
    }
    if constexpr (kHalfO) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) raise |= st.l_x[mt][0] > kHalfLShare || st.l_x[mt][1] > kHalfLShare;
    }
    return raise;
  }

  // Raises R of the rows whose tile max exceeds it, or whose Σ P̂ grew large, by whole steps k and
  // divides O and l by 2^k. The first keys of a row set R to their max (+ kHeadroom).
  // The work is per warp (any of its rows); within it, each half of the rows (hf) skips the O shifts
  // when none of its 8 rows rises, and the long-row guard (two shuffles) runs only where a row's sum
  // can reach it at all (cx.check_lq).
  // DEFER (the warp-specialized loop, whose P·V of the previous tile may still be accumulating into O):
  // R and l as always, O's shift left to shift_o_rows with the steps in *defer (0 where none).
  template <bool DEFER = false>
  static __device__ __forceinline__ void raise_reference(State& st, const RowVals& m_tile, const Ctx& cx,
                                                         int (*defer)[2] = nullptr) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        // The row's largest share decides (the guard), so its 4 threads agree.
        bool halve = false;
        if (cx.check_lq) {
          if constexpr (kExactSum) {
            float lx = st.l_x[mt][hf];
            lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 1));
            lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 2));
            halve = lx > kLxRescale;
          } else {
            u32 lq = st.l_q[mt][hf];
            u32 other = dev::shfl_xor(lq, 1);
            lq = lq > other ? lq : other;
            other = dev::shfl_xor(lq, 2);
            lq = lq > other ? lq : other;
            halve = lq > kLRescale;
          }
        }
        const float r_old = st.r[mt][hf], m = m_tile[mt][hf];
        int k = 0;
        float r_new = r_old;
        if (m > r_old) {
          if constexpr (WG) {
            // The steps as a biased float (ceil_biased) rather than FRND.CEIL and F2I: two conversions
            // (the pipe of the exponentials) and an add fewer in most tiles of a short row, where the
            // raises are frequent. The
            // mma.sync form keeps the code below: this one costs it 4 bytes of spills on sm_89 (d 64,
            // smooth=qk / qkv).
            const float d = plus_headroom(m - r_old);   // +inf while O and l are still 0 (r_old = -inf)
            if (d > 64.f) {   // R becomes the max: O >> 64 is nothing, so R needs no whole step
              k = r_old == dev::neg_inf() ? 0 : 64;
              r_new = plus_headroom(m);
            } else {
              const float biased = ceil_biased(d);
              k = __float_as_int(biased) - int8::kMagicBits;
              r_new = r_old + (biased - int8::kMagic);
            }
          } else if (r_old == dev::neg_inf()) {
            r_new = m + kHeadroom;   // O and l are still 0
          } else {
            const float steps = ceilf(m - r_old + kHeadroom);
            k = steps < 64.f ? static_cast<int>(steps) : 64;
            r_new = r_old + steps;
          }
        }
        if (halve) {
          k += 1;
          r_new += 1.f;
        }
        if constexpr (kHalfO) {   // the row's largest share decides, so its 4 threads agree
          float lx = fmaxf(st.l_x[mt][hf], __shfl_xor_sync(0xffffffffu, st.l_x[mt][hf], 1));
          lx = fmaxf(lx, __shfl_xor_sync(0xffffffffu, lx, 2));
          if (lx > kHalfLShare) {
            k += 1;
            r_new += 1.f;
          }
        }
        st.r[mt][hf] = r_new;
        if constexpr (DEFER) defer[mt][hf] = k;
        if (!__any_sync(0xffffffffu, k != 0)) continue;
        if constexpr (DEFER) {
          // O is shifted by shift_o_rows once its last product landed.
        } else if constexpr (kIntPV) {
#pragma unroll
          for (int n = 0; n < kON; ++n)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] = int8::shift_floor(st.o[mt][n][e], k);
        } else {
          scale_o(st, mt, hf, k);
        }
        if constexpr (!kExactSum) st.l_q[mt][hf] = int8::shift_floor(st.l_q[mt][hf], k);
        st.l_x[mt][hf] *= pow2_neg(k);
      }
  }

  // O's shift by the steps raise_reference<true> deferred (rows whose warp has none skip it).
  static __device__ __forceinline__ void shift_o_rows(State& st, const int (&k)[kMT][2]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        if (!__any_sync(0xffffffffu, k[mt][hf] != 0)) continue;
        if constexpr (kIntPV) {
#pragma unroll
          for (int n = 0; n < kON; ++n)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] = int8::shift_floor(st.o[mt][n][e], k[mt][hf]);
        } else {
          scale_o(st, mt, hf, k[mt][hf]);
        }
      }
  }

  // x + kHeadroom, with no add when it is 0 (x + 0.f is an add: x may be -0).
  static __device__ __forceinline__ float plus_headroom(float x) { return kHeadroom != 0.f ? x + kHeadroom : x; }

  // 1.5 * 2^23 + ceil(x) for x in [0, 64], without a conversion instruction: the sum is rounded up at a
  // spacing of 1, so its float bits minus the bias's are ceil(x) as an int, and its value minus the
  // bias is ceil(x) as a float (both exact).
  static __device__ __forceinline__ float ceil_biased(float x) {
    float y;
    asm("add.rp.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(int8::kMagic));
    return y;
  }

  // Whether this thread's share of row half hf's sum passed the overflow guard (long rows only).
  static __device__ __forceinline__ bool long_row_share(const State& st, int mt, int hf) {
    if constexpr (kExactSum) return st.l_x[mt][hf] > kLxRescale;
    else return st.l_q[mt][hf] > kLRescale;
  }

  // 2^-k from its exponent bits (k <= 65 here: a raise is clamped to 64 steps, plus one halving).
  static __device__ __forceinline__ float pow2_neg(int k) { return __int_as_float((127 - k) << 23); }

  // Float O (pv=fp16 / fp8): O *= 2^-k for rows g + 8hf of m16 tile mt. Powers of two: exact (a
  // product under the format's smallest normal loses low bits, irrelevant next to the new max).
  static __device__ __forceinline__ void scale_o(State& st, int mt, int hf, int k) {
    const float f = pow2_neg(k);
    if constexpr (kHalfO) {
      const u32 f2 = dev::pack_half2(f, f);
#pragma unroll
      for (int n = 0; n < kON; ++n) st.o[mt][n][hf] = dev::hmul2(st.o[mt][n][hf], f2);
    } else {
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) st.o[mt][n][e] *= f;
    }
  }
