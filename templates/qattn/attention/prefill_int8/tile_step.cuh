// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// One KV tile of the consumer: Q·K^T, logits, reference max, P·V, in that order.
  // One KV tile, resident in stage buffer t % STAGES; NPS < kPVSteps: only its first 32 * NPS keys (the
  // rest masked for every row of the CTA).
  template <bool MASKED, int NPS = kPVSteps>
  static __device__ __forceinline__ void step(State& st, const Ctx& cx, const char* smem, u32 sbase, int t) {
    const int slot = t % STAGES;
    Scores s;
    if constexpr (QSMOOTH) block_mean_scores(const_cast<char*>(smem), sbase, slot);
    qk<NPS>(s, st, sbase + k_off(slot), WG ? q_tile_addr(sbase) : sbase);
    // ΔS comes from other warps: publish it. After this warp's Q·K^T, so that the mma latency overlaps
    // the wait. The ΔS buffer's next write (tile t + 1) follows the loop's barrier, after every read here.
    if constexpr (QSMOOTH) __syncthreads();
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(s[0]);
    }
    Logits u;
    RowVals m_tile;
    RowFac fac;
    const bool raise = logits<MASKED, NPS>(u, m_tile, fac, s, st, cx,
                                      reinterpret_cast<const float*>(smem + scale_off(slot)), t * BN,
                                      reinterpret_cast<const float*>(smem + kDsOff));
    if (__any_sync(0xffffffffu, raise)) raise_reference(st, m_tile, cx);
    softmax_pv<NPS>(st, u, fac, sbase + v_off(slot));
    if constexpr (WG) {
      dev::wgmma_wait<0>();
      dev::fence_operands(st.o[0]);
    }
  }

  // This warpgroup's 64 rows of the first Q atom (the others follow BM * kAtomBytes apart).
  // One warpgroup (bm 64): the address is the same for every thread, which the compiler then keeps in a
  // uniform register with the Q descriptor instead of rebuilding both from threadIdx in every tile.
  static __device__ __forceinline__ u32 q_tile_addr(u32 sbase) {
    return kThreads == 128 ? sbase : sbase + (threadIdx.x / 128) * 64 * kAtomBytes;
  }
