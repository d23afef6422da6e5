// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// O += P V: V fragments decoded from quantized rows or read by ldmatrix.trans from fp16/bf16
// tiles, the output channel order, and the per-head V scale.
  // Output column (n tile c, position p) -> channel; see pv_product_quant for the quantized order.
  static __device__ __forceinline__ int column_channel(int col) {
    if constexpr (kQuant) {
      constexpr int W = (KV == Fmt::int4 || KV == Fmt::flashq) ? 8 : 4;   // channels per V word (pv_product_*)
      const int c = col / 8, p = col % 8;
      return (c / W) * 8 * W + p * W + c % W;
    } else {
      return col;
    }
  }

  // pair of fp16 (lo from a, hi from b) from byte k of two words, for the int8 path: bytes of a and b
  // interleaved next to the exponent byte 0x64, then 1152 subtracted (a and b carry the ^0x80 bias).
  static __device__ __forceinline__ u32 int8_pair(u32 ab_interleaved, int k) {
    // ab_interleaved = [a.b(2i), b.b(2i), a.b(2i+1), b.b(2i+1)]; k = 0 or 1 picks the byte pair.
    return dev::hsub2(dev::prmt(ab_interleaved, dev::kHalf2_1024, k == 0 ? 0x5150u : 0x5352u), dev::kHalf2_1152);
  }

  // V fragments (B operand, k16 tokens x n8 channels) of a quantized cache, decoded straight from the
  // raw rows: a B register pairs two tokens of one channel, and a 32-bit word of a row holds 4 (int8) or
  // 8 (int4) channels of one token, so the lane at n position g reads the word of channels
  // [g * W, g * W + W) (W channels per word) of its 4 tokens, and n tile j of channel block J holds
  // channel J * 8W + g * W + j. The output columns are mapped back in column_channel().
  // Tokens at or past len (inside a straddling group) read as zero (their P is 0, and for int4
  // per_group their garbage scale could be NaN).
  static constexpr int kVWordChannels = KV == Fmt::int4 ? 8 : 4;
  static constexpr int kVBlocks = D / (8 * kVWordChannels);

  static __device__ __forceinline__ void pv_product_quant(const float (&s)[kMT][kNT][4], Softmax& st,
                                                          const char* v_tile, int t0, int len, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      u32 pa[kMT][4];
      p_fragments(s, kk, pa);
      // The lane's tokens: k positions 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of this k16 step.
      const int r[4] = {16 * kk + 2 * t, 16 * kk + 2 * t + 1, 16 * kk + 2 * t + 8, 16 * kk + 2 * t + 9};
      bool valid[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) valid[e] = t0 + r[e] < len;
#pragma unroll
      for (int J = 0; J < kVBlocks; ++J) {
        u32 w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          w[e] = load<u32>(v_tile + r[e] * kRow + kHdr + 4 * (J * 8 + g));
          if constexpr (!kFoldV) w[e] = valid[e] ? w[e] : 0u;
        }
        u32 b[kVWordChannels][2];   // [j][b0 | b1]
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const u32 a = w[2 * half], c = w[2 * half + 1];
          if constexpr (KV == Fmt::int8) {
            const u32 lo = dev::prmt(a ^ 0x80808080u, c ^ 0x80808080u, 0x5140u);   // bytes 0, 1 of a and c
            const u32 hi = dev::prmt(a ^ 0x80808080u, c ^ 0x80808080u, 0x7362u);   // bytes 2, 3
            b[0][half] = int8_pair(lo, 0);
            b[1][half] = int8_pair(lo, 1);
            b[2][half] = int8_pair(hi, 0);
            b[3][half] = int8_pair(hi, 1);
          } else if constexpr (KV == Fmt::fp8e4m3) {
#pragma unroll
            for (int k = 0; k < 4; ++k)   // byte k of a and c into bytes 1 and 3: channel k of both tokens
              b[k][half] = dev::e4m3_bytes13_to_half2(dev::prmt(a, c, 0x4000u + 0x1111u * k));
          } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {   // byte k of a and c: channels 2k, 2k + 1
              const u32 y = dev::prmt(a, c, 0x4400u + 0x1111u * k);   // [a.bk, a.bk, c.bk, c.bk]
              if constexpr (kSubnormalInt4) {   // low nibbles 2^-24 q, high nibbles 2^-20 q (finish() restores)
                b[2 * k][half] = y & 0x000F000Fu;
                b[2 * k + 1][half] = y & 0x00F000F0u;
              } else {
                b[2 * k][half] = dev::hsub2((y & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
                b[2 * k + 1][half] = dev::hsub2(((y >> 4) & 0x000F000Fu) | dev::kHalf2_1024, dev::kHalf2_1024);
              }
            }
            if constexpr (!kFoldV) {   // per group: (scale, shift) of the two tokens of each register
              const int group = (J * 8 * kVWordChannels + g * kVWordChannels) / kGroupChannels;
              u32 hdr_a = load<u32>(v_tile + r[2 * half] * kRow + 4 * group);
              u32 hdr_c = load<u32>(v_tile + r[2 * half + 1] * kRow + 4 * group);
              hdr_a = valid[2 * half] ? hdr_a : 0u;
              hdr_c = valid[2 * half + 1] ? hdr_c : 0u;
              const u32 scale = dev::prmt(hdr_a, hdr_c, 0x5410u), shift = dev::prmt(hdr_a, hdr_c, 0x7632u);
#pragma unroll
              for (int j = 0; j < kVWordChannels; ++j) b[j][half] = dev::hfma2(b[j][half], scale, shift);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kVWordChannels; ++j)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) dev::mma_m16n8k16_f32<kMma>(st.o[mt][J * kVWordChannels + j], pa[mt], b[j]);
      }
    }
  }

  // fp16/bf16 V chunk read in place: rows at or past len (inside a straddling group) are zeroed.
  static __device__ __forceinline__ void zero_tail_rows(u32 v_tile, int t0, int len, int lane) {
    const int first = len - t0;
    if (first >= BN) return;
    const dev::U32x4 zero = {0u, 0u, 0u, 0u};
    for (int i = lane; i < (BN - first) * kOC; i += 32) {
      const int r = first + i / kOC, c = i % kOC;
      dev::st_shared_16(v_tile + dev::swizzled_offset<kOC>(r, c), zero);
    }
  }

  // O += P V for one chunk; V fragments by ldmatrix.trans from a swizzled fp16/bf16 tile.
  static __device__ __forceinline__ void pv_product(const float (&s)[kMT][kNT][4], Softmax& st, u32 v_tile,
                                                    const u32 (&v_lane)[4]) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      u32 pa[kMT][4];
      p_fragments(s, kk, pa);
#pragma unroll
      for (int dp = 0; dp < kOC / 2; ++dp) {
        u32 vb[4];
        dev::ldmatrix_x4_trans(vb, v_tile + v_lane[dp % 4] + (dp / 4) * 128 + kk * 16 * kOC * 16);
        const u32 b0[2] = {vb[0], vb[1]};
        const u32 b1[2] = {vb[2], vb[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          dev::mma_m16n8k16_f32<kMma>(st.o[mt][2 * dp], pa[mt], b0);
          dev::mma_m16n8k16_f32<kMma>(st.o[mt][2 * dp + 1], pa[mt], b1);
        }
      }
    }
  }

  // O *= f (a per-head V scale factored out of the whole product).
  static __device__ __forceinline__ void scale_output(Softmax& st, float f) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int c = 0; c < kOC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][c][e] *= f;
  }
