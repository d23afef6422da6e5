// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The consumer's first product: S = Q̂·K̂^T on int8 (mma.sync m16n8k32 or wgmma), e4m3 (wgmma) or packed
// int4 (m16n8k64 .s4) tensor cores, and the Q fragments it reads.
  // This warp's Q A-fragments from the Q tile at sbase (mma.sync form).
  static __device__ __forceinline__ void load_q_fragments(u32 (&qf)[kMT][kQKSteps][4], u32 sbase) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) {
        const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
        const int chunk = 2 * ks + (lane >> 4);
        dev::ldmatrix_x4(qf[mt][ks], qk_addr<BM>(sbase, row, chunk));
      }
  }

  // S = Q̂·K̂^T of the K tile at ktile (biased or raw: see Scores).
  // qtile: this warpgroup's 64 Q rows (wgmma form only).
  // qtile: mma.sync form: the smem base (its Q tile), read when the Q fragments are not in registers.
  template <int NPS = kPVSteps>
  static __device__ __forceinline__ void qk(Scores& s, const State& st, u32 ktile, u32 qtile) {
    const int lane = threadIdx.x & 31;
    // Q fragments: a register copy of st.qf (free: fully unrolled), or reloaded from the Q tile.
    u32 qf[WG ? 1 : kMT][kQKSteps][4];
    if constexpr (!WG && kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks)
#pragma unroll
          for (int i = 0; i < 4; ++i) qf[mt][ks][i] = st.qf[mt][ks][i];
    } else if constexpr (!WG) {
      load_q_fragments(qf, qtile);
    }
    if constexpr (!WG) {   // the wgmma form's first product ignores the old values
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kSN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][j][e] = kRawS ? 0 : int8::kMagicBits;
    }
    if constexpr (WG) {
      const dev::u64 qd = dev::wgmma_desc(qtile, kAtomBytes), kd = dev::wgmma_desc(ktile, kAtomBytes);
      // k-step ks reads the 32 bytes at 32 * (ks % kStepsPerAtom) of every row of atom ks / kStepsPerAtom
      // (descriptor addresses count 16-byte units).
      constexpr int kStepsPerAtom = kAtomBytes / 32;
      // NPS < kPVSteps: the first 32 * NPS keys only (their smem rows come first: k_smem_row permutes
      // within 32 keys), into the first 4 * NPS blocks of S.
      constexpr int kN = 32 * NPS;
      using Elem = typename Pick<FP8QK, float, int>::type;
      auto& sn = *reinterpret_cast<Elem(*)[kN / 8][4]>(&s[0][0][0]);
      dev::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) {
        const int atom = ks / kStepsPerAtom, step = 2 * (ks % kStepsPerAtom);
        const dev::u64 qa = qd + atom * (BM * kAtomBytes / 16) + step, kb = kd + atom * (BN * kAtomBytes / 16) + step;
        // The first step ignores the old values (raw S, kRawS).
        if constexpr (FP8QK) dev::wgmma_e4m3_ss<kN>(sn, qa, kb, ks > 0 ? 1 : 0);
        else dev::wgmma_s8s8_ss<kN>(sn, qa, kb, ks > 0 ? 1 : 0);
      }
      dev::wgmma_commit();   // the caller waits
    } else if constexpr (S4) {
      qk_s4(s, st, ktile);
    } else {
#pragma unroll
      for (int j = 0; j < kSN; ++j) {
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          u32 kb[4];
          const int row = 8 * j + (lane & 7), chunk = 4 * h + (lane >> 3);
          dev::ldmatrix_x4(kb, qk_addr<BN>(ktile, row, chunk));
          const u32 b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][2 * h], b0);
            dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][2 * h + 1], b1);
          }
        }
        if constexpr (D % 64 != 0) {   // d = 96: the last k32 step alone, from an x2 load (lanes 0-15)
          constexpr int ks = D / 32 - 1;
          u32 kb[2];
          const int row = 8 * j + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, row, chunk));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k32_s8_s32(s[mt][j], qf[mt][ks], kb);
        }
      }
    }
  }

  // S4: S += Q̂·K̂^T on packed int4 rows of kQB bytes, one m16n8k64 .s4 mma per 32-byte step. K's
  // B fragments come as in the int8 path (x4: two steps; x2: one step); a trailing 16-byte half step
  // (d = 96) takes an x1 load and a zero upper register.
  static __device__ __forceinline__ void qk_s4(Scores& s, const State& st, u32 ktile) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < kSN; ++j) {
      const int row = 8 * j + (lane & 7);
#pragma unroll
      for (int h = 0; h < kQB / 64; ++h) {
        u32 kb[4];
        dev::ldmatrix_x4(kb, qk_addr<BN>(ktile, row, 4 * h + (lane >> 3)));
        const u32 b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][2 * h], b0);
          dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][2 * h + 1], b1);
        }
      }
      if constexpr (kQB % 64 >= 32) {   // one whole step left (d = 64: the only one; d = 96: the first)
        constexpr int ks = kQB / 64 * 2;
        u32 kb[2];
        dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, row, 2 * ks + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][ks], kb);
      }
      if constexpr (kQB % 32 != 0) {    // d = 96: the last 16 bytes (32 codes); the other half is zero
        constexpr int ks = kQKSteps - 1;
        u32 kb[1];
        dev::ldmatrix_x1(kb, qk_addr<BN>(ktile, row, 2 * ks));
        const u32 b[2] = {kb[0], 0u};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k64_s4_s32(s[mt][j], st.qf[mt][ks], b);
      }
    }
  }

  // S4: this warp's Q A-fragments from the packed Q tile; the half step of d = 96 loads its lower
  // 16 bytes (x2: rows 0-7 and 8-15) and zeroes the upper two registers.
  static __device__ __forceinline__ void load_q_s4(State& st, u32 sbase) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
#pragma unroll
      for (int ks = 0; ks < kQB / 32; ++ks) dev::ldmatrix_x4(st.qf[mt][ks], qk_addr<BM>(sbase, row, 2 * ks + (lane >> 4)));
      if constexpr (kQB % 32 != 0) {
        constexpr int ks = kQKSteps - 1;
        u32 qa[2];
        dev::ldmatrix_x2(qa, qk_addr<BM>(sbase, row, 2 * ks));
        st.qf[mt][ks][0] = qa[0];
        st.qf[mt][ks][1] = qa[1];
        st.qf[mt][ks][2] = 0u;
        st.qf[mt][ks][3] = 0u;
      }
    }
  }
