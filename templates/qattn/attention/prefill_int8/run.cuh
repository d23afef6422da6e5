// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The kernel's entry: the CTA's tile (tile_order.h), the prologue (Q tile, first KV stages, fused Q,
// block means) and the main loop over KV tiles, then the epilogue.
 public:
  // TMA (_tma): the kernel's parameter is a TmaAttentionParams (its maps must stay in parameter space).
  static __device__ __forceinline__ void run_tma(const TmaAttentionParams& p, char* smem) {
    run(p.a, smem, &p.k_map, &p.v_map);
  }

  static __device__ __forceinline__ void run(const AttentionParams& p, char* smem, const TmaMap* k_map = nullptr,
                                             const TmaMap* v_map = nullptr) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // Causal: the heaviest query tiles first; in the wgmma form in bands of heads whose K/V fit L2
    // (tile_order.h).
    constexpr tile_order::Order kOrder = !CAUSAL ? tile_order::Order::in_order
                                         : WG      ? tile_order::Order::banded
                                                   : tile_order::Order::by_head;
    const tile_order::Slot slot = tile_order::this_cta<kOrder>(p.heads_q);
    if (kOrder == tile_order::Order::banded && slot.b >= p.batch) return;   // past the last head of the last band
    const int q_tile = slot.q_tile, h = slot.h, b = slot.b;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int q0 = q_tile * BM;
    const Span sp = span_of(p, b);
    if (VARLEN && q0 >= sp.q_len()) return;   // past this sequence's queries

    Ctx cx;
    cx.k = static_cast<const signed char*>(p.k.ptr) + b * p.k.sb + h_kv * p.k.sh;
    cx.v = static_cast<const signed char*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    cx.k_scale = p.k_scale.ptr + b * p.k_scale.sb + h_kv * p.k_scale.sh;
    cx.k_ss = p.k.ss;
    cx.v_sc = p.v.sc;
    cx.k_group = p.k_scale.group;
    cx.kv_len = sp.kv_len();
    cx.q_len = sp.q_len();
    cx.causal_offset = sp.kv_len() - sp.q_len();
    cx.row0 = q0 + warp * 16 * kMT;
    cx.vh = static_cast<const dev::u16*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    if constexpr (VARLEN) cx.vh += sp.kv_row0() * p.v.ss;
    cx.v_ss = p.v.ss;
    if constexpr (TMA) {   // the host checked that these divide (runtime/device/tma_maps.cpp)
      const long long k_at = b * p.k.sb + h_kv * p.k.sh;
      cx.k_map = k_map;
      cx.v_map = v_map;
      cx.k_col = static_cast<int>(k_at % p.k.ss);
      cx.k_group16 = static_cast<int>(k_at / p.k.ss / 16);
      cx.v_row = static_cast<int>((b * p.v.sb + h_kv * p.v.sh) / p.v.sc);
    }

    // KV tiles [0, n_tiles) hold every key any row of this CTA sees; the first n_full need no mask.
    int kv_end = sp.kv_len();
    int n_full = sp.kv_len() / BN;
    if (CAUSAL) {
      const int last_row = (q0 + BM < sp.q_len() ? q0 + BM : sp.q_len()) - 1;
      kv_end = kv_end < last_row + cx.causal_offset + 1 ? kv_end : last_row + cx.causal_offset + 1;
      const int first_row_end = q0 + cx.causal_offset + 1;
      const int full_by_row = first_row_end > 0 ? first_row_end / BN : 0;
      n_full = n_full < full_by_row ? n_full : full_by_row;
    }
    const int n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    // Each thread holds bn / 4 keys of a row per tile, each P̂ <= 255 (and y < 255): 255 · 32768 / 4 <
    // kLRescale, 255 · 30720 / 4 < kLxRescale. Float O has no integer range to keep.
    cx.check_lq = kIntPV && n_tiles * BN > (kExactSum ? 30720 : 32768);

    State st;
    const signed char* qg = static_cast<const signed char*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    const float* qscale = p.q_scale.ptr + b * p.q_scale.sb + h * p.q_scale.sh;
    const float qmul = p.softmax_scale * dev::kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
        float qs = 1.f;
        if (QF == Gran::none && row < sp.q_len()) qs = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0] * qmul;
        // A zero row (scale 0) must give a uniform softmax, not 0 · inf = NaN on masked keys.
        st.qs[mt][hf] = fmaxf(qs, 1e-30f);
        st.r[mt][hf] = dev::neg_inf();
        st.l_q[mt][hf] = 0u;
        st.l_x[mt][hf] = 0.f;
      }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 0; e < (kHalfO ? 2 : 4); ++e) st.o[mt][n][e] = 0;

    if (n_tiles > 0) {
      u32 sbase = dev::smem_addr(smem);
      if constexpr (WG) {   // the swizzle atoms of wgmma operands are 1024-byte aligned (smem_bytes has the slack)
        const u32 pad = (1024u - (sbase & 1023u)) & 1023u;
        sbase += pad;
        smem += pad;
      }
      constexpr int kQChunks = BM * kDChunks;
#pragma unroll
      for (int it = 0; it < (QF == Gran::none ? (kQChunks + kThreads - 1) / kThreads : 0); ++it) {
        const int i = it * kThreads + tid;
        if (kQChunks % kThreads == 0 || i < kQChunks) {
          const int r = i / kDChunks, c = i % kDChunks;
          const bool ok = q0 + r < sp.q_len();
          dev::cp_async_16(qk_addr<BM>(sbase, r, c),
                           qg + (ok ? (q0 + r) * p.q.ss + c * 16 : 0), ok);
        }
      }
      Loader ld = make_loader(cx);
      if constexpr (TMA) {
        if (tid == 0) {
          for (int s = 0; s < STAGES; ++s) dev::mbar_init(stage_barrier(sbase, s), 1);
          dev::fence_mbar_init();
          asm volatile("st.shared.u64 [%0], %1;" ::"r"(k_scales_slot(sbase)),
                       "l"(reinterpret_cast<unsigned long long>(cx.k_scale)) : "memory");
        }
        __syncthreads();
      }
      // The Q tile travels in the first group, together with KV tile 0.
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_kv_tile(cx, ld, sbase, s, s * BN);
        dev::cp_async_commit();
      }
      if constexpr (QSMOOTH) prepare_block_means(p, smem, b, h, q0, sp.q_len());
      if constexpr (QF != Gran::none) quantize_q_tile(p, smem, sbase, b, h, q0, sp);   // while the first KV tiles fly
      dev::cp_async_wait<STAGES - 2>();
      if constexpr (TMA) dev::fence_proxy_async();   // the Q tile, visible to wgmma (the loop has no fence)
      __syncthreads();
      if constexpr (QF != Gran::none) {   // the Q scales of the fused tile (written before the barrier)
        const float* group_amax = reinterpret_cast<const float*>(smem + kFusedQOff) + BM;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
            if (row < sp.q_len())
              st.qs[mt][hf] = fmaxf(quant::scale_of(group_amax[row - q0], static_cast<float>(kQMax)) * qmul, 1e-30f);
          }
      }
      if constexpr (S4) load_q_s4(st, sbase);
      if constexpr (QSMOOTH) init_block_mean_factors(st, p, smem, qscale, q0, sp.q_len());
#pragma unroll
      for (int mt = 0; mt < (WG || S4 || !kQInRegs ? 0 : kMT); ++mt)
#pragma unroll
        for (int ks = 0; ks < kQKSteps; ++ks) {
          const int row = warp * 16 * kMT + 16 * mt + (lane & 15);
          const int chunk = 2 * ks + (lane >> 4);
          dev::ldmatrix_x4(st.qf[mt][ks], qk_addr<BM>(sbase, row, chunk));
        }

      for (int t = 0; t < n_tiles; ++t) {
        dev::cp_async_wait<STAGES - 2>();
        if constexpr (TMA) dev::mbar_wait(stage_barrier(sbase, t % STAGES), (t / STAGES) & 1);
        else if constexpr (WG) dev::fence_proxy_async();   // this thread's cp.async writes, visible to wgmma
        __syncthreads();   // tile t landed for all threads; tile t - 1's buffer is free
        const int t_load = t + STAGES - 1;
        if (t_load < n_tiles) load_kv_tile(cx, ld, sbase, t_load % STAGES, t_load * BN);
        dev::cp_async_commit();
        if (t < n_full) {
          step<false>(st, cx, smem, sbase, t);
        } else if constexpr (kHalfTile) {
          if (t == n_tiles - 1 && kv_end - t * BN <= BN / 2) step<true, kPVSteps / 2>(st, cx, smem, sbase, t);
          else step<true>(st, cx, smem, sbase, t);
        } else {
          step<true>(st, cx, smem, sbase, t);
        }
      }
      dev::cp_async_wait<0>();
    }
    if constexpr (kOrder == tile_order::Order::banded) {
      const tile_order::Slot end = tile_order::this_cta_again<kOrder>(p.heads_q);   // not held through the loop
      store_output(p, st, cx, end.b, end.h, end.h / (p.heads_q / p.heads_kv));
    } else {
      store_output(p, st, cx, b, h, h_kv);
    }
  }

  // Where (b, h_kv) starts in K, V^T and the K scales, and the CTA's lengths.
  static __device__ __forceinline__ Ctx make_ctx(const AttentionParams& p, const Span& sp, int b, int h_kv, int q0,
                                                 const TmaMap* k_map, const TmaMap* v_map) {
    Ctx cx;
    cx.k = static_cast<const signed char*>(p.k.ptr) + b * p.k.sb + h_kv * p.k.sh;
    cx.v = static_cast<const signed char*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    cx.k_scale = p.k_scale.ptr + b * p.k_scale.sb + h_kv * p.k_scale.sh;
    cx.k_ss = p.k.ss;
    cx.v_sc = p.v.sc;
    cx.k_group = p.k_scale.group;
    cx.kv_len = sp.kv_len();
    cx.q_len = sp.q_len();
    cx.causal_offset = sp.kv_len() - sp.q_len();
    cx.row0 = q0 + (threadIdx.x >> 5) * 16 * kMT;
    cx.vh = static_cast<const dev::u16*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    if constexpr (VARLEN) cx.vh += sp.kv_row0() * p.v.ss;
    cx.v_ss = p.v.ss;
    if constexpr (TMA) {   // the host checked that these divide (runtime/device/tma_maps.cpp)
      const long long k_at = b * p.k.sb + h_kv * p.k.sh;
      cx.k_map = k_map;
      cx.v_map = v_map;
      cx.k_col = static_cast<int>(k_at % p.k.ss);
      cx.k_group16 = static_cast<int>(k_at / p.k.ss / 16);
      cx.v_row = static_cast<int>((b * p.v.sb + h_kv * p.v.sh) / p.v.sc);
    }
    return cx;
  }

  // KV tiles [0, n_tiles) hold every key any row of this CTA sees; the first n_full need no mask.
  struct KvTiles {
    int kv_end, n_full, n_tiles;
  };
  static __device__ __forceinline__ KvTiles kv_tiles(const Span& sp, Ctx& cx, int q0) {
    int kv_end = sp.kv_len();
    int n_full = sp.kv_len() / BN;
    if (CAUSAL) {
      const int last_row = (q0 + BM < sp.q_len() ? q0 + BM : sp.q_len()) - 1;
      kv_end = kv_end < last_row + cx.causal_offset + 1 ? kv_end : last_row + cx.causal_offset + 1;
      const int first_row_end = q0 + cx.causal_offset + 1;
      const int full_by_row = first_row_end > 0 ? first_row_end / BN : 0;
      n_full = n_full < full_by_row ? n_full : full_by_row;
    }
    const int n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    // Each thread holds bn / 4 keys of a row per tile, each P̂ <= 255 (and y < 255): 255 · 32768 / 4 <
    // kLRescale, 255 · 30720 / 4 < kLxRescale. Float O has no integer range to keep.
    cx.check_lq = kIntPV && n_tiles * BN > (kExactSum ? 30720 : 32768);
    return KvTiles{kv_end, n_full, n_tiles};
  }

  // The running state before the first KV tile: Q's scales per row (pre-quantized Q), R = -inf, O = l = 0.
  static __device__ __forceinline__ void init_state(State& st, const AttentionParams& p, const Span& sp, const Ctx& cx, int b,
                                                    int h) {
    const int lane = threadIdx.x & 31;
    const float* qscale = p.q_scale.ptr + b * p.q_scale.sb + h * p.q_scale.sh;
    const float qmul = p.softmax_scale * dev::kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = cx.row0 + 16 * mt + (lane >> 2) + 8 * hf;
        float qs = 1.f;
        if (QF == Gran::none && row < sp.q_len()) qs = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0] * qmul;
        // A zero row (scale 0) must give a uniform softmax, not 0 · inf = NaN on masked keys.
        st.qs[mt][hf] = fmaxf(qs, 1e-30f);
        st.r[mt][hf] = dev::neg_inf();
        st.l_q[mt][hf] = 0u;
        st.l_x[mt][hf] = 0.f;
      }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < kON; ++n)
#pragma unroll
        for (int e = 0; e < (kHalfO ? 2 : 4); ++e) st.o[mt][n][e] = 0;
  }

  // The shared-memory base the layout starts at: 1024-byte aligned for the wgmma form (its swizzle
  // atoms; smem_bytes has the slack). smem moves with it.
  static __device__ __forceinline__ u32 align_smem(char*& smem) {
    u32 sbase = dev::smem_addr(smem);
    if constexpr (WG) {
      const u32 pad = (1024u - (sbase & 1023u)) & 1023u;
      sbase += pad;
      smem += pad;
    }
    return sbase;
  }

  // The pre-quantized int8 Q tile into shared memory by the kernel's kThreads (consumer) threads, one
  // cp.async group (the caller commits).
  static __device__ __forceinline__ void load_q_tile(const AttentionParams& p, int q_len, u32 sbase, int b, int h, int q0) {
    const signed char* qg = static_cast<const signed char*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    constexpr int kQChunks = BM * kDChunks;
#pragma unroll
    for (int it = 0; it < (kQChunks + kThreads - 1) / kThreads; ++it) {
      const int i = it * kThreads + static_cast<int>(threadIdx.x);
      if (kQChunks % kThreads == 0 || i < kQChunks) {
        const int r = i / kDChunks, c = i % kDChunks;
        const bool ok = q0 + r < q_len;
        dev::cp_async_16(qk_addr<BM>(sbase, r, c), qg + (ok ? (q0 + r) * p.q.ss + c * 16 : 0), ok);
      }
    }
  }
