// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The producer: K and V^T tiles into the ring of shared-memory stages, by every thread's cp.async
// (checked or not) or by one thread's TMA boxes on the stage's mbarrier, and the K scales.
  // K rows are stored permuted: within every 32 keys, smem row 8j + n holds the key that S column n of
  // n8 block j must be, so that the S accumulator fragments of blocks (j0, j1) and (j2, j3) pack
  // directly into the m16n8k32 A fragment of P (4 consecutive keys per thread) while V^T keeps its
  // natural key order. Bits of the key offset w4..w0 map to smem row bits (w4, w1, w3, w2, w0).
  static __device__ __forceinline__ int k_smem_row(int r) {
    const int w = r & 31;
    return (r & ~31) | (w & 16) | ((w & 2) << 2) | ((w & 12) >> 1) | (w & 1);
  }

  // This thread's share of the tile loads: running pointers that advance one tile per load (tiles are
  // loaded in order), so nothing but the pointers stays live across the loop.
  struct Loader {
    const signed char* k;       // this thread's first K chunk of the next tile
    const signed char* v;       // this thread's first V^T chunk of the next tile
    long long k_pass, v_pass;   // bytes between this thread's consecutive K / V^T chunks
    int k_row;                  // key of this thread's first K chunk in the next tile
  };
  // One pass of the CTA covers kKRowStep K rows with kKLoads chunks per thread: 1 when the row's chunks
  // divide the threads, 3 at d = 96 (6 chunks per row: 64 rows per pass of 4 warps).
  static constexpr int kKLoads = kDChunks / gcd(kThreads, kDChunks);
  static constexpr int kKRowStep = kThreads / gcd(kThreads, kDChunks);
  static constexpr int kKPassBytes = kKRowStep * kAtomBytes;   // smem distance of a thread's rows in two passes
  // k_smem_row and the swizzle only permute the low 5 row bits, so for kKRowStep a multiple of 16 a
  // pass adds kKRowStep smem rows; at d = 256 with 4 warps (8 rows per pass) the row is permuted anew.
  static constexpr bool kKLinearPasses = kKRowStep % 16 == 0;
  static constexpr int kVRowStep = kThreads / kNChunks;   // V^T rows covered by one pass
  static constexpr int kKPasses = (BN + kKRowStep - 1) / kKRowStep;
  static constexpr int kVPasses = (D + kVRowStep - 1) / kVRowStep;

  static __device__ __forceinline__ Loader make_loader(const Ctx& cx) {
    const int tid = threadIdx.x;
    Loader ld;
    const int kr = tid / kDChunks, kc = tid % kDChunks;
    ld.k = cx.k + kr * cx.k_ss + kc * 16;
    ld.k_pass = kKRowStep * cx.k_ss;
    ld.k_row = kr;
    const int vr = tid / kNChunks, vc = tid % kNChunks;
    ld.v = cx.v + vr * cx.v_sc + vc * 16;
    ld.v_pass = kVRowStep * cx.v_sc;
    return ld;
  }

  // wgmma form with int8 P·V: tiles wholly inside kv_len (all but the last) skip the per-row bounds
  // checks (CHECKED = false: fewer instructions per tile). The other kernels keep one checked loader: the second
  // copy costs ptxas registers there (4 spill bytes: pv=fp16 accum=fp16 d 96 on sm_80, pv=fp8 two_level
  // d 64 on sm_90a at 4 blocks per SM).
  static __device__ __forceinline__ void load_kv_tile(const Ctx& cx, Loader& ld, u32 sbase, int slot, int k0) {
    if constexpr (TMA) {
      load_kv_tile_tma(cx, sbase, slot, k0);
    } else {
      if (WG && kIntPV && k0 + BN <= cx.kv_len) load_kv_tile<false>(cx, ld, sbase, slot, k0);
      else load_kv_tile<true>(cx, ld, sbase, slot, k0);
    }
  }

  // TMA (_tma): thread 0 issues the K and V^T boxes of the tile on the stage's mbarrier; the K scales
  // stay a cp.async per thread (zero past kv_len, as below). K rows past kv_len come in as they are
  // (the next head's rows, or zeros past the tensor): their scores are masked, and V^T is zero there.
  static constexpr u32 kTmaTileBytes = BN * kQB + D * BN;
  static constexpr int kBarOff = smem_bytes(D, BM, BN, STAGES, false, kVBytes, S4, QSMOOTH, QF != Gran::none);
  static __device__ __forceinline__ u32 stage_barrier(u32 sbase, int slot) { return sbase + kBarOff + 8 * slot; }
  static __device__ __forceinline__ void load_kv_tile_tma(const Ctx& cx, u32 sbase, int slot, int k0) {
    if (threadIdx.x == 0) {
      const u32 bar = stage_barrier(sbase, slot);
      dev::mbar_arrive_expect_tx(bar, kTmaTileBytes);
      dev::tma_load_5d(sbase + k_off(slot), cx.k_map, bar, cx.k_col, 0, 0, 0, cx.k_group16 + k0 / 16);
      dev::tma_load_2d(sbase + v_off(slot), cx.v_map, bar, k0, cx.v_row);
    }
    load_k_scales<true>(cx, sbase, slot, k0);
  }

  // The K scales of (b, h_kv). TMA: read from shared memory each tile (stored there at the start): at
  // the 128-register cap of the d 64 forms ptxas would otherwise spill the pointer (to local memory).
  static __device__ __forceinline__ u32 k_scales_slot(u32 sbase) { return stage_barrier(sbase, STAGES); }
  static __device__ __forceinline__ const float* k_scales(const Ctx& cx, u32 sbase) {
    if constexpr (TMA) {
      unsigned long long ptr;
      // volatile + memory: the slot is written by thread 0 before a __syncthreads, so this read must
      // stay after that barrier (a plain asm has no memory dependence and could move above it).
      asm volatile("ld.shared.u64 %0, [%1];" : "=l"(ptr) : "r"(k_scales_slot(sbase)) : "memory");
      return reinterpret_cast<const float*>(ptr);
    } else {
      return cx.k_scale;
    }
  }

  template <bool CHECKED>
  static __device__ __forceinline__ void load_k_scales(const Ctx& cx, u32 sbase, int slot, int k0) {
    const int tid = threadIdx.x;
    if (tid < BN) {
      const int key = k0 + tid;
      const bool ok = !CHECKED || key < cx.kv_len;
      const int idx = cx.k_group == 1 ? key : (cx.k_group > 0 ? key / cx.k_group : 0);
      dev::cp_async_ca<4>(sbase + scale_off(slot) + 4 * tid, k_scales(cx, sbase) + (ok ? idx : 0), ok);
    }
  }
  template <bool CHECKED>
  static __device__ __forceinline__ void load_kv_tile(const Ctx& cx, Loader& ld, u32 sbase, int slot, int k0) {
    const int tid = threadIdx.x;
    const int kr0 = tid / kDChunks, kc0 = tid % kDChunks;   // the chunk ld.k points at
#pragma unroll
    for (int l = 0; l < kKLoads; ++l) {
      // Chunk l of this thread's pass: for l > 0 (d = 96) its offset from ld.k is recomputed per tile.
      const int kr = (tid + l * kThreads) / kDChunks, kc = (tid + l * kThreads) % kDChunks, ksr = k_smem_row(kr);
      const u32 k_smem = qk_addr<BN>(sbase + k_off(slot), ksr, kc);
      const signed char* ksrc = l == 0 ? ld.k : ld.k + (kr - kr0) * cx.k_ss + (kc - kc0) * 16;
      const int k_row = l == 0 ? ld.k_row : ld.k_row + kr - kr0;
#pragma unroll
      for (int it = 0; it < kKPasses; ++it) {
        if (BN % kKRowStep == 0 || kr + it * kKRowStep < BN) {
          // K is not padded: zero-fill past kv_len
          const bool ok = !CHECKED || k_row + it * kKRowStep < cx.kv_len;
          const u32 dst = kKLinearPasses ? k_smem + it * kKPassBytes
                                         : qk_addr<BN>(sbase + k_off(slot), k_smem_row(kr + it * kKRowStep), kc);
          dev::cp_async_16(dst, ok ? ksrc : ld.k, ok);
        }
        ksrc += ld.k_pass;
      }
    }
    if constexpr (kHalfV) {
      load_v_half(cx, sbase + v_off(slot), k0);
    } else {
      const int vr = tid / kNChunks, vc = tid % kNChunks;
      const u32 v_smem = sbase + v_off(slot) + vr * BN + int8::swizzle<kNChunks>(vr, vc) * 16;
      const signed char* vsrc = ld.v;
#pragma unroll
      for (int it = 0; it < kVPasses; ++it) {
        // V^T is zero-padded to kVPadTokens and bn divides it: always in bounds.
        if (D % kVRowStep == 0 || vr + it * kVRowStep < D) dev::cp_async_16(v_smem + it * kVRowStep * BN, vsrc, true);
        vsrc += ld.v_pass;
      }
    }
    load_k_scales<CHECKED>(cx, sbase, slot, k0);
    ld.k += BN * cx.k_ss;
    ld.v += BN;
    ld.k_row += BN;
  }

  // pv=fp16: the V tile as given (bn keys x d elements of type OUT, 16-byte chunks, zero past kv_len).
  // Key r goes to smem row k_smem_row(r), the row its S column has (see k_smem_row), so that P's k16
  // A fragments (S blocks 2i, 2i + 1 as they are) meet V rows 16i .. 16i + 15 in smem order; rows are
  // swizzled for conflict-free ldmatrix.trans (dev::swizzled_offset).
  static constexpr int kVHChunks = D / 8;   // 16-byte chunks per V row
  static __device__ __forceinline__ void load_v_half(const Ctx& cx, u32 vtile, int k0) {
    constexpr int kChunks = BN * kVHChunks;
    if constexpr (kThreads % kVHChunks == 0) {
      // A thread keeps its chunk column; its rows step by kRowStep, so one running pointer serves.
      constexpr int kRowStep = kThreads / kVHChunks;
      const int r0 = static_cast<int>(threadIdx.x) / kVHChunks, c = static_cast<int>(threadIdx.x) % kVHChunks;
      const dev::u16* src = cx.vh + (k0 + r0) * cx.v_ss + 8 * c;
      const long long step = kRowStep * cx.v_ss;
#pragma unroll
      for (int it = 0; it < BN / kRowStep; ++it) {
        const int r = r0 + it * kRowStep;
        const bool ok = k0 + r < cx.kv_len;
        dev::cp_async_16(vtile + dev::swizzled_offset<kVHChunks>(k_smem_row(r), c), ok ? src : cx.vh, ok);
        src += step;
      }
    } else {   // d = 96 (12 chunks per row)
#pragma unroll
      for (int it = 0; it < (kChunks + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + static_cast<int>(threadIdx.x);
        if (kChunks % kThreads == 0 || i < kChunks) {
          const int r = i / kVHChunks, c = i % kVHChunks, key = k0 + r;
          const bool ok = key < cx.kv_len;
          dev::cp_async_16(vtile + dev::swizzled_offset<kVHChunks>(k_smem_row(r), c),
                           cx.vh + (ok ? key * cx.v_ss + 8 * c : 0), ok);
        }
      }
    }
  }
