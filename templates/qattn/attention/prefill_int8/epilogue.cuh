// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The epilogue: O / l in the output type (V's scales and mean applied) and the LSE.
  static constexpr float kPScaleOf = kIntPV ? kPScale : (kHalfV ? 1.f : kFp8PScale);   // P per unit 2^(L - R)

  static __device__ __forceinline__ void store_output(const AttentionParams& p, const State& st,
                                                      const Ctx& cx, int b, int h, int h_kv) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const float* vs = p.v_scale.ptr + b * p.v_scale.sb + h_kv * p.v_scale.sh;
    const float* vmean = p.v_mean ? p.v_mean + (static_cast<long long>(b) * p.heads_kv + h_kv) * D : nullptr;
    dev::u16* out = static_cast<dev::u16*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
    // VARLEN: the sequence's rows, read again rather than held in registers through the main loop.
    const Span sp = span_of(p, b);
    const int q_rows = VARLEN ? sp.q_len() : cx.q_len;
    if constexpr (VARLEN) out += sp.q_row0() * p.o.ss;
    const float vs_all = V_GRAN == Gran::per_tensor ? vs[0] : 1.f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float l_exact = dev::quad_sum(st.l_x[mt][hf]);
        const float l = kExactSum ? l_exact : dev::quad_sum(static_cast<float>(st.l_q[mt][hf]));
        const int row = cx.row0 + 16 * mt + g + 8 * hf;
        if (row >= q_rows) continue;
        const bool seen = l > 0.f;
        const float inv = seen ? vs_all / l : 0.f;
        dev::u16* orow = out + row * p.o.ss;
#pragma unroll
        for (int n = 0; n < kON; ++n) {
          const int col = 8 * n + 2 * t4;
          const float2 o2 = o_pair(st, mt, n, hf);
          float v0 = o2.x * inv, v1 = o2.y * inv;
          if (V_GRAN == Gran::per_channel) {
            const float2 sc = *reinterpret_cast<const float2*>(vs + col);
            v0 *= sc.x;
            v1 *= sc.y;
          }
          if (vmean && seen) {
            const float2 mu = *reinterpret_cast<const float2*>(vmean + col);
            v0 += mu.x;
            v1 += mu.y;
          }
          *reinterpret_cast<u32*>(orow + col) = dev::pack2<OUT>(v0, v1);
        }
        if (p.lse && t4 == 0) {
          // dense: [b, h_q, q_len]; VARLEN: [total_q, h_q]
          const long long at = VARLEN ? static_cast<long long>(sp.q_row0() + row) * p.heads_q + h
                                      : (static_cast<long long>(b) * p.heads_q + h) * cx.q_len + row;
          p.lse[at] =
              l_exact > 0.f ? (st.r[mt][hf] + dev::log2_approx(l_exact / kPScaleOf)) * dev::kLn2 : dev::neg_inf();
        }
      }
  }
