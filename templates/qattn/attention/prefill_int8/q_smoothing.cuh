// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// Q smoothing (q_smooth): the block means as an m16 A tile and ΔS = q̄·K̂^T per KV tile on the tensor
// cores, staged in shared memory for the logits.
  // ---- Q smoothing (QSMOOTH; see "Q smoothing" in docs/design/prefill-kernels.md) ----
  // Shared memory after everything else (qsmooth_bytes in prefill_int8_shape.h):
  //   kMeanFragOff:  the m16n8k32 A fragments of the block means, [kQKSteps][32 lanes] x 4 u32: row g < kQBlocks
  //                  holds the high codes of block g, row 8 + g its low codes, the other rows zero;
  //   kDsOff:        ΔS · k_scale of the current KV tile, [kQBlocks][BN] fp32, keys in natural order;
  //   kMeanScaleOff: the scale of each block mean's high codes, [8] fp32.
  static constexpr int kQBlocks = BM / kQMeanBlock;   // 1 .. 4 block means per CTA
  static constexpr int kMeanFragOff = smem_bytes(D, BM, BN, STAGES, WG, kVBytes, S4);
  static constexpr int kDsOff = kMeanFragOff + 16 * D;
  static constexpr int kMeanScaleOff = kDsOff + 4 * kQBlocks * BN;
  // The low codes carry the rounding residual of the high codes in units of 1/kMeanLowScale high codes.
  static constexpr float kMeanLowScale = 254.f;

  // Packs 4 floats, already in code units and within [-127.5, 127.5], into 4 int8 codes (round to
  // nearest even, as the quantizer does).
  static __device__ __forceinline__ u32 pack_codes(float a, float b, float c, float d) {
    auto byte = [](float x) { return static_cast<u32>(__float2int_rn(fminf(fmaxf(x, -127.f), 127.f)) & 0xff); };
    return byte(a) | (byte(b) << 8) | (byte(c) << 16) | (byte(d) << 24);
  }

  // Quantizes this CTA's block means (p.q_mean) into the A fragments in shared memory, two int8 codes
  // per value: hi = round(m / s) with s = amax / 127, lo = round((m / s - hi) · kMeanLowScale), so
  // m ≈ s · (hi + lo / kMeanLowScale) to ~1/64000 of amax: the mean is shared by the 64 rows of its block,
  // so its rounding error would repeat in each of them, and the otherwise idle rows 8 .. 15 of the m16
  // tile carry lo for free. Warp w fills fragment row w (and w + WARPS); rows past kQBlocks or past
  // q_len (the sequence's) are zero. The caller's barrier publishes it.
  static __device__ void prepare_block_means(const AttentionParams& p, char* smem, int b, int h, int q0, int q_len) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    u32* frag = reinterpret_cast<u32*>(smem + kMeanFragOff);
    float* mscale = reinterpret_cast<float*>(smem + kMeanScaleOff);
    const int n_blocks = (p.q_len + kQMeanBlock - 1) / kQMeanBlock;   // p.q_mean's layout
    const int seq_blocks = (q_len + kQMeanBlock - 1) / kQMeanBlock;
    for (int g = warp; g < 8; g += WARPS) {
      const int blk = q0 / kQMeanBlock + g;
      const bool live = g < kQBlocks && blk < (VARLEN ? seq_blocks : n_blocks);
      const float* mean = p.q_mean + ((static_cast<long long>(b) * p.heads_q + h) * n_blocks + (live ? blk : 0)) * D;
      float amax = 0.f;
      if (live)
        for (int c = lane; c < D; c += 32) amax = fmaxf(amax, fabsf(mean[c]));
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, dev::shfl_xor(amax, off));
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      if (lane == 0) mscale[g] = amax / 127.f;
      // Word w holds channels 4w .. 4w + 3: k-step w / 8, bytes 16 · ((w % 8) / 4) + 4 · (w % 4) of it,
      // which is register 2 · half (+1 for the low codes) of lane 4g + w % 4.
      for (int w = lane; w < D / 4; w += 32) {
        u32 hi = 0u, lo = 0u;
        if (live) {
          const float4 m = *reinterpret_cast<const float4*>(mean + 4 * w);
          const float x[4] = {m.x * inv, m.y * inv, m.z * inv, m.w * inv};
          float r[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) r[i] = (x[i] - rintf(x[i])) * kMeanLowScale;
          hi = pack_codes(x[0], x[1], x[2], x[3]);
          lo = pack_codes(r[0], r[1], r[2], r[3]);
        }
        const int ks = w / 8, half = (w % 8) / 4, t4 = w % 4;
        u32* dst = frag + (ks * 32 + 4 * g + t4) * 4 + 2 * half;
        dst[0] = hi;   // a0 / a2: row g
        dst[1] = lo;   // a1 / a3: row g + 8
      }
    }
  }

  // Per row: the factor from staged ΔS · k_scale (units of high mean codes x K codes x k_scale) to u's
  // units (Q codes x K codes x k_scale), i.e. mscale / q_scale. A row whose smoothed codes are all zero
  // (q_scale 0: a row equal to its block mean, as a block of one row) takes mscale as its q_scale:
  // its S is 0 whatever the scale, and the logits stay u · qs. After the barrier after prepare_block_means.
  static __device__ void init_block_mean_factors(State& st, const AttentionParams& p, const char* smem,
                                                 const float* qscale, int q0, int q_len) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* mscale = reinterpret_cast<const float*>(smem + kMeanScaleOff);
    const float qmul = p.softmax_scale * dev::kLog2e;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = warp * 16 * kMT + 16 * mt + (lane >> 2) + 8 * hf, row = q0 + r;
        const float ms = mscale[r / kQMeanBlock];
        float w = 0.f;
        if (row < q_len) w = qscale[p.q_scale.group > 0 ? row / p.q_scale.group : 0];
        if (!(w > 0.f)) w = ms;
        st.dsf[mt][hf] = w > 0.f && row < q_len ? ms / w : 0.f;
        if (row < q_len) st.qs[mt][hf] = fmaxf(w * qmul, 1e-30f);
      }
  }

  // ΔS of the K tile in `slot` for every block mean: one m16 x bn product (rows g: high codes, 8 + g:
  // low codes), split over the warps by n8 column blocks (warp w: blocks w, w + WARPS, ...), combined
  // and scaled by k_scale, stored for logits() to read. K is read with the same ldmatrix rows as qk(),
  // so column 2t4 + e of block j is the key logits() maps it to. The caller's barrier publishes it.
  // INT4 K (m16n8k64 .s4): the means would need 4-bit A codes; two mmas (hi and lo nibble rows, or a
  // third level) instead of the one here would keep the mean's precision.
  static __device__ void block_mean_scores(char* smem, u32 sbase, int slot) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const uint4* frag = reinterpret_cast<const uint4*>(smem + kMeanFragOff);
    const float* kscale = reinterpret_cast<const float*>(smem + scale_off(slot));
    float* ds = reinterpret_cast<float*>(smem + kDsOff);
    const u32 ktile = sbase + k_off(slot);
#pragma unroll
    for (int j = warp; j < kSN; j += WARPS) {
      int c[4] = {0, 0, 0, 0};
#pragma unroll
      for (int ks = 0; ks < kQKSteps; ++ks) {
        const uint4 a = frag[ks * 32 + lane];
        const u32 af[4] = {a.x, a.y, a.z, a.w};
        u32 kb[2];
        dev::ldmatrix_x2(kb, qk_addr<BN>(ktile, 8 * j + (lane & 7), 2 * ks + ((lane >> 3) & 1)));
        dev::mma_m16n8k32_s8_s32(c, af, kb);
      }
      if (g < kQBlocks) {
        const int key = 32 * (j / 4) + 16 * ((j & 3) >> 1) + 2 * (j & 1) + 4 * t4;
        const float2 ksc = *reinterpret_cast<const float2*>(kscale + key);
        const float x0 = static_cast<float>(c[0]) + static_cast<float>(c[2]) * (1.f / kMeanLowScale);
        const float x1 = static_cast<float>(c[1]) + static_cast<float>(c[3]) * (1.f / kMeanLowScale);
        *reinterpret_cast<float2*>(ds + g * BN + key) = make_float2(x0 * ksc.x, x1 * ksc.y);
      }
    }
  }
