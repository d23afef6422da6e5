// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The warp-specialized entry (sm_90a, tiling _ws): the kernel's kThreads threads are consumers (one or
// two warpgroups of 64 query rows each, exactly as in run()), and one more warpgroup is the producer,
// whose first warp alone keeps a ring of STAGES K / V^T / K-scale tiles full:
//   full[s]   the tile in stage s landed: the TMA boxes' bytes (expect_tx by lane 0) and one cp.async
//             arrival from each of the 32 lanes loading the tile's K scales;
//   empty[s]  every consumer thread is done reading stage s (its P·V product completed).
// So no consumer issues a copy or waits on a CTA-wide barrier inside the loop, and the producer runs
// up to STAGES tiles ahead. The producer gives its registers to the consumers (setmaxnreg), which spend
// them on overlapping their own work: S of tile t is issued together with P·V of tile t - 1, and the
// softmax of tile t runs while that P·V is on the tensor cores (consume()). With two consumer
// warpgroups the issues also take turns (named barriers 2 and 3): a warpgroup issues its pair only after
// the other issued its own, so one warpgroup's softmax runs while the other's products occupy the
// tensor cores. PERSISTENT (_ps): the CTA loops over query tiles (units_of, next_unit); the ring runs on
// from tile to tile, so the producer fills the next tile's stages during this one's last products, and
// the consumers load the next Q tile during this one's epilogue.
 public:
  static constexpr int kProducerThreads = 128;
  static constexpr int kWsThreads = ws_threads(WARPS);   // kThreads + kProducerThreads
  static constexpr int kWsBlocksPerSm = ws_blocks_per_sm(WARPS);   // its __launch_bounds__
  static __device__ __forceinline__ void run_ws(const TmaAttentionParams& tp, char* smem) {
    static_assert(WS, "run_ws is the entry of the warp-specialized form");
    const AttentionParams& p = tp.a;
    const u32 sbase = align_smem(smem);
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) {
        dev::mbar_init(stage_barrier(sbase, s), 1 + 32);
        dev::mbar_init(empty_barrier(sbase, s), kThreads);
      }
      dev::fence_mbar_init();
    }
    __syncthreads();   // the last CTA-wide barrier: from here on the roles never wait for each other's threads
    const Units units = units_of(p);
    tile_order::Slot slot;
    int w = next_unit(p, units, units.first, slot);
    if (threadIdx.x >= kThreads) {
      dev::release_registers<kProducerRegs>();
      if (threadIdx.x >= kThreads + 32) return;
      // Ring position of each unit's first tile: the stages and their phases run on across units, so
      // the producer fills the next unit's stages while the consumers finish this one.
      for (int ring = 0; w < units.end; w = next_unit(p, units, w + units.step, slot)) {
        const int q0 = slot.q_tile * BM;
        const Span sp = span_of(p, slot.b);
        Ctx cx = make_ctx(p, sp, slot.b, slot.h / (p.heads_q / p.heads_kv), q0, &tp.k_map, &tp.v_map);
        const int n_tiles = kv_tiles(sp, cx, q0).n_tiles;
        produce(cx, sbase, n_tiles, ring);
        ring += n_tiles;
      }
      return;
    }
    dev::claim_registers<kConsumerRegs>();
    if (w < units.end) load_q_tile(p, span_of(p, slot.b).q_len(), sbase, slot.b, slot.h, slot.q_tile * BM);
    dev::cp_async_commit();
    for (int ring = 0; w < units.end;) {
      const int h = slot.h, b = slot.b, h_kv = h / (p.heads_q / p.heads_kv);
      const int q0 = slot.q_tile * BM;
      const Span sp = span_of(p, b);
      Ctx cx = make_ctx(p, sp, b, h_kv, q0, &tp.k_map, &tp.v_map);
      const KvTiles kv = kv_tiles(sp, cx, q0);
      State st;
      init_state(st, p, sp, cx, b, h);
      dev::cp_async_wait<0>();
      dev::fence_proxy_async();                   // the Q tile, visible to wgmma
      dev::named_sync(kConsumerBarrier, kThreads);
      if (kPingPong && threadIdx.x >= 128) dev::named_arrive(kTurnBarrier, 2 * 128);   // warpgroup 0 goes first
      consume(st, cx, kv, smem, sbase, ring);
      if (kPingPong && threadIdx.x < 128) dev::named_sync(kTurnBarrier, 2 * 128);   // warpgroup 1's last turn
      ring += kv.n_tiles;
      const int w_next = next_unit(p, units, w + units.step, slot);
      if (PERSISTENT && w_next < units.end) {   // the next Q tile loads during this one's epilogue
        dev::named_sync(kConsumerBarrier, kThreads);   // both warpgroups' last Q·K^T read this Q tile
        load_q_tile(p, span_of(p, slot.b).q_len(), sbase, slot.b, slot.h, slot.q_tile * BM);
        dev::cp_async_commit();
      }
      if constexpr (kWsOrder == tile_order::Order::banded) {
        // Head and batch again rather than held through the main loop.
        const tile_order::Slot end =
            PERSISTENT ? tile_order::unit_slot(kWsOrder, w, units.grid, p.heads_q) : tile_order::this_cta_again<kWsOrder>(p.heads_q);
        store_output(p, st, cx, end.b, end.h, end.h / (p.heads_q / p.heads_kv));
      } else {
        store_output(p, st, cx, b, h, h_kv);
      }
      w = w_next;
    }
  }

  // The CTA's work units: its own tile (units [0, 1)), or with PERSISTENT every gridDim.x-th unit of the
  // grid tile_order::grid() gives for the call, from unit blockIdx.x (tile_order.h, unit_slot).
  static constexpr tile_order::Order kWsOrder = CAUSAL ? tile_order::Order::banded : tile_order::Order::in_order;
  struct Units {
    tile_order::Grid grid;
    int first, step, end;
  };
  static __device__ __forceinline__ Units units_of(const AttentionParams& p) {
    if constexpr (!PERSISTENT) return Units{tile_order::Grid{1, 1, 1}, 0, 1, 1};
    const tile_order::Grid g = tile_order::grid(kWsOrder, (p.q_len + BM - 1) / BM, p.heads_q, p.batch, p.band_heads);
    return Units{g, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), static_cast<int>(tile_order::unit_count(g))};
  }

  // The first unit from w on (stepping by units.step) with work: a tile of a real head (the last band
  // may be short) and of a query row of its sequence. Its slot into `slot`; units.end if none is left.
  static __device__ __forceinline__ int next_unit(const AttentionParams& p, const Units& units, int w, tile_order::Slot& slot) {
    for (; w < units.end; w += units.step) {
      slot = PERSISTENT ? tile_order::unit_slot(kWsOrder, w, units.grid, p.heads_q) : tile_order::this_cta<kWsOrder>(p.heads_q);
      if (kWsOrder == tile_order::Order::banded && slot.b >= p.batch) continue;   // past the last head of the last band
      if (VARLEN && slot.q_tile * BM >= span_of(p, slot.b).q_len()) continue;   // past this sequence's queries
      return w;
    }
    return units.end;
  }

  // The consumer's loop. Per tile t >= 1: S_t = Q·K_t^T and O += P_{t-1}·V_{t-1} issued back to back;
  // once S_t is in, tile t's softmax (logits, R's raise, P_t) while P·V runs; then (P·V done) stage
  // t - 1 is released and O, which now includes tile t - 1, shifts to the raised R. Tile t sits at ring
  // position ring + t (stage_of, phase_of).
  static __device__ __forceinline__ void consume(State& st, const Ctx& cx, const KvTiles& kv, const char* smem, u32 sbase,
                                                 int ring) {
    if (kv.n_tiles == 0) return;
    Scores s;
    PFrag pf[2];   // P of even / odd tiles: the P·V in flight reads one while the softmax writes the other
    const int stage0 = stage_of(ring);
    dev::mbar_wait(stage_barrier(sbase, stage0), phase_of(ring));
    take_turn();
    qk(s, st, sbase + k_off(stage0), q_tile_addr(sbase));
    pass_turn();
    dev::wgmma_wait<0>();
    dev::fence_operands(s[0]);
    int k[kMT][2];   // R's steps per row, applied to O once its P·V landed (none for the first tile: O = 0)
    if (kv.n_full > 0) softmax_tile<false>(st, cx, s, smem, 0, stage0, pf[0], k);
    else softmax_tile<true>(st, cx, s, smem, 0, stage0, pf[0], k);
    for (int t = 1; t < kv.n_tiles; t += 2) {
      overlapped_tile(st, cx, kv, s, k, smem, sbase, t, ring, pf[0], pf[1]);
      if (t + 1 < kv.n_tiles) overlapped_tile(st, cx, kv, s, k, smem, sbase, t + 1, ring, pf[1], pf[0]);
    }
    const int last = stage_of(ring + kv.n_tiles - 1);
    take_turn();
    if ((kv.n_tiles - 1) & 1) issue_pv(st, pf[1], sbase + v_off(last));
    else issue_pv(st, pf[0], sbase + v_off(last));
    pass_turn();
    dev::wgmma_wait<0>();
    dev::fence_operands(st.o[0]);
    dev::mbar_arrive(empty_barrier(sbase, last));
  }

  // Tile t >= 1: S_t and P·V of tile t - 1 (P in `prev`) issued, tile t's softmax into `next` while that
  // P·V runs, then its stage released and O shifted to the raised R.
  static __device__ __forceinline__ void overlapped_tile(State& st, const Ctx& cx, const KvTiles& kv, Scores& s,
                                                         int (&k)[kMT][2], const char* smem, u32 sbase, int t, int ring,
                                                         const PFrag& prev, PFrag& next) {
    const int stage = stage_of(ring + t), prev_stage = stage_of(ring + t - 1);
    dev::mbar_wait(stage_barrier(sbase, stage), phase_of(ring + t));
    take_turn();
    qk(s, st, sbase + k_off(stage), q_tile_addr(sbase));
    issue_pv(st, prev, sbase + v_off(prev_stage));
    pass_turn();
    dev::wgmma_wait<1>();   // S_t (P·V of t - 1 may still run)
    dev::fence_operands(s[0]);
    if (t < kv.n_full) softmax_tile<false>(st, cx, s, smem, t, stage, next, k);
    else softmax_tile<true>(st, cx, s, smem, t, stage, next, k);
    dev::wgmma_wait<0>();   // P·V of tile t - 1 is in O: its stage is free, and O moves to the raised R
    dev::fence_operands(st.o[0]);
    dev::mbar_arrive(empty_barrier(sbase, prev_stage));
    shift_o_rows(st, k);
  }

  // The stage of ring position i and the phase its barriers are in there.
  static __device__ __forceinline__ int stage_of(int i) { return i % STAGES; }
  static __device__ __forceinline__ u32 phase_of(int i) { return static_cast<u32>(i / STAGES) & 1u; }

  // Tile t's softmax on S (in registers): logits and tile max, R's raise (l rescaled; O's steps into k,
  // applied by the caller once P·V of tile t - 1 landed) and P_t into pf.
  template <bool MASKED>
  static __device__ __forceinline__ void softmax_tile(State& st, const Ctx& cx, const Scores& s, const char* smem,
                                                      int t, int stage, PFrag& pf, int (&k)[kMT][2]) {
    Logits u;
    RowVals m_tile;
    RowFac fac;
    const bool raise = logits<MASKED, kPVSteps>(u, m_tile, fac, s, st, cx,
                                               reinterpret_cast<const float*>(smem + scale_off(stage)), t * BN,
                                               reinterpret_cast<const float*>(smem + kDsOff));
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) k[mt][0] = k[mt][1] = 0;
    if (__any_sync(0xffffffffu, raise)) raise_reference<true>(st, m_tile, cx, k);
    if constexpr (kIntPV) softmax_pv_int8<kPVSteps, false>(st, u, fac, 0u, &pf);
    else softmax_pv_float<kPVSteps, false>(st, u, fac, 0u, &pf);
  }

  // O += P·V of the V^T tile at vtile (wgmma, committed; the caller waits).
  static __device__ __forceinline__ void issue_pv(State& st, const PFrag& pf, u32 vtile) {
    if constexpr (kIntPV) pv_int8_wgmma<kPVSteps>(st, pf, vtile);
    else pv_fp8_wgmma<kPVSteps>(st, pf, vtile);
  }

  // Tensor-core turns of the two consumer warpgroups (no-ops otherwise): take before issuing products,
  // pass right after issuing them (not after they complete).
  static __device__ __forceinline__ void take_turn() {
    if constexpr (kPingPong) dev::named_sync(kTurnBarrier + static_cast<int>(threadIdx.x / 128), 2 * 128);
  }
  static __device__ __forceinline__ void pass_turn() {
    if constexpr (kPingPong) dev::named_arrive(kTurnBarrier + 1 - static_cast<int>(threadIdx.x / 128), 2 * 128);
  }

 private:
  static constexpr bool kPingPong = WS && WARPS == 8;
  static constexpr int kConsumerBarrier = 1;
  static constexpr int kTurnBarrier = 2;   // and 3: the turn of warpgroup 0, 1
  // Registers: the CTA holds kWsThreads x the launch bound's count; the producer keeps 24.
  static constexpr int kLaunchRegs = (65536 / (kWsThreads * kWsBlocksPerSm)) / 8 * 8;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegsFit = (kLaunchRegs * kWsThreads - kProducerThreads * kProducerRegs) / kThreads / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegsFit < 256 ? kConsumerRegsFit : 256;

  static __device__ __forceinline__ u32 empty_barrier(u32 sbase, int stage) { return stage_barrier(sbase, STAGES + 1 + stage); }

  // The producer warp: the unit's tile t into ring position ring + t once the consumers released the tile
  // before it in that stage. Lane 0 issues the K and V^T boxes; every lane copies BN / 32 K scales (zero
  // past kv_len) and counts one arrival when they land.
  static __device__ __forceinline__ void produce(const Ctx& cx, u32 sbase, int n_tiles, int ring) {
    const int lane = threadIdx.x & 31;
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = stage_of(ring + t), k0 = t * BN;
      if (ring + t >= STAGES) dev::mbar_wait(empty_barrier(sbase, stage), phase_of(ring + t) ^ 1u);
      const u32 full = stage_barrier(sbase, stage);
      if (lane == 0) {
        dev::mbar_arrive_expect_tx(full, kTmaTileBytes);
        dev::tma_load_5d(sbase + k_off(stage), cx.k_map, full, cx.k_col, 0, 0, 0, cx.k_group16 + k0 / 16);
        dev::tma_load_2d(sbase + v_off(stage), cx.v_map, full, k0, cx.v_row);
      }
#pragma unroll
      for (int i = 0; i < BN / 32; ++i) {
        const int key = k0 + 32 * i + lane;
        const bool ok = key < cx.kv_len;
        const int idx = cx.k_group == 1 ? key : (cx.k_group > 0 ? key / cx.k_group : 0);
        dev::cp_async_ca<4>(sbase + scale_off(stage) + 4 * (32 * i + lane), cx.k_scale + (ok ? idx : 0), ok);
      }
      dev::cp_async_mbar_arrive(full);
    }
  }
