// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// The end of a CTA: the warps' states merged through shared memory, and the output or the
// split's partial written.
  // Merges the warps' states and writes the output (one split) or the split's partial (slot
  // split_base + split). unified_max: every warp's partial is against phi2, so the merge is a plain sum,
  // and one thread per row ORs the row's flags (its largest score against the window) into row_flags:
  // one atomic per row and CTA. fallback_only (the exact pass after a unified-max one): only the rows
  // whose flags are not exactly kUmSeen are written.
  static __device__ void finish(const DecodeParams& p, Softmax& st, char* smem, int b, int h, int split, int row0,
                                int rows, int warp, int lane) {
    float* mo = reinterpret_cast<float*>(smem);   // [WARPS][BM][D]
    float* mm = mo + WARPS * BM * D;              // [WARPS][BM]
    float* ml = mm + WARPS * BM;                  // [WARPS][BM]
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + g + half * 8;
        const float l = dev::quad_sum(st.l[mt][half]);
        if constexpr (KV == Fmt::int4 && kFoldV) {
          const float shift = dev::quad_sum(st.v_shift[mt][half]);
#pragma unroll
          for (int c = 0; c < kOC; ++c) {
            // n tile c holds pair c % 8 of its V words: odd pairs 2^-20 codes, even ones 2^-24.
            const float f = kSubnormalInt4 ? (c % 2 ? dev::kInt4Subnormal / 16.f : dev::kInt4Subnormal) : 1.f;
            st.o[mt][c][half * 2] = fmaf(st.o[mt][c][half * 2], f, shift);
            st.o[mt][c][half * 2 + 1] = fmaf(st.o[mt][c][half * 2 + 1], f, shift);
          }
        }
        float m_row = st.m[mt][half];
        if constexpr (SMX == SoftmaxMode::unified_max) m_row = dev::quad_max(m_row);   // per lane until here
        if (t == 0) {
          mm[warp * BM + row] = m_row;
          ml[warp * BM + row] = l;
        }
#pragma unroll
        for (int c = 0; c < kOC; ++c) {
          mo[(warp * BM + row) * D + c * 8 + 2 * t] = st.o[mt][c][half * 2];
          mo[(warp * BM + row) * D + c * 8 + 2 * t + 1] = st.o[mt][c][half * 2 + 1];
        }
      }
    __syncthreads();
    const int gqa = p.heads_q / p.heads_kv;
    for (int idx = threadIdx.x; idx < BM * D; idx += kThreads) {
      const int row = idx / D, col = idx % D;
      if (row0 + row >= rows) continue;
      float m = dev::neg_inf();
#pragma unroll
      for (int w = 0; w < WARPS; ++w) m = fmaxf(m, mm[w * BM + row]);
      const int hq = h * gqa + (row0 + row) % gqa, i = (row0 + row) / gqa;
      const long long out_row = ((long long)b * p.heads_q + hq) * p.q_len + i;
      if constexpr (SMX == SoftmaxMode::exact)
        if (p.fallback_only && p.row_flags[out_row] == kUmSeen) continue;   // the unified-max result stands
      if constexpr (SMX == SoftmaxMode::unified_max) {
        // x - phi >= hi for the largest score <=> for some score (subtraction is monotone); -inf: no flag.
        if (col == 0) {
          const float top = m - st.phi2;
          const int flags = (top >= p.um_hi2 ? kUmOverflow : 0) | (top > p.um_lo2 ? kUmSeen : 0);
          if (flags != 0) atomicOr(p.row_flags + out_row, flags);
        }
        m = st.phi2;
      }
      float acc = 0.f, sum = 0.f;
      if (m != dev::neg_inf())
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          const float f = SMX == SoftmaxMode::unified_max ? 1.f : dev::exp2_approx(mm[w * BM + row] - m);
          acc += f * mo[(w * BM + row) * D + col];
          sum += f * ml[w * BM + row];
        }
      const float value = sum > 0.f ? acc / sum : 0.f;
      const float lse2 = sum > 0.f ? m + dev::log2_approx(sum) : dev::neg_inf();
      const int ch = column_channel(col);
      const int slot = p.split_base + split;
      if (p.splits == 1) {
        u16* o = static_cast<u16*>(p.o.ptr) + (long long)b * p.o.sb + (long long)hq * p.o.sh + (long long)i * p.o.ss;
        o[ch] = dev::from_float<OUT>(value);
        if (col == 0 && p.lse != nullptr) p.lse[out_row] = lse2 * dev::kLn2;
      } else {
        p.part_o[(out_row * p.splits + slot) * D + ch] = value;
        if (col == 0) p.part_lse[out_row * p.splits + slot] = lse2;
      }
    }
  }
