// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The configuration (config.cuh) under the short names the other parts use, and the combinations the
// kernel refuses.
  static constexpr Gran V_GRAN = Cfg::v_scale;
  static constexpr Fmt OUT = Cfg::out;
  static constexpr int D = Cfg::head_dim;
  static constexpr bool CAUSAL = Cfg::causal;
  static constexpr int BM = Cfg::block_m;
  static constexpr int BN = Cfg::block_n;
  static constexpr int WARPS = Cfg::warps;
  static constexpr int STAGES = Cfg::stages;
  static constexpr bool WG = Cfg::wgmma;
  static constexpr Fmt PV = Cfg::pv;
  static constexpr Accum ACC = Cfg::accum;
  static constexpr bool S4 = Cfg::packed_int4;
  static constexpr bool QSMOOTH = Cfg::q_smooth;
  static constexpr bool INT4 = Cfg::int4_codes;
  static constexpr bool FP8QK = Cfg::fp8_codes;
  static constexpr Gran QF = Cfg::fused_q;
  static constexpr bool VSMOOTH = Cfg::v_smooth;
  static constexpr bool KBLOCK = Cfg::k_block_scale;
  static constexpr bool TMA = Cfg::tma;
  static constexpr bool WS = Cfg::warp_specialized;
  static constexpr bool PERSISTENT = Cfg::persistent;
  static constexpr bool VARLEN = Cfg::varlen;

  static_assert(QF == Gran::none || QF == Gran::per_token || QF == Gran::per_warp || QF == Gran::per_thread ||
                    QF == Gran::per_block,
                "prefill_int8: the fused Q (QF) takes token-local Q scales: per_token, per_warp, per_thread, per_block");
  static_assert(QF == Gran::none || !(S4 || QSMOOTH), "prefill_int8: the fused Q writes plain int8 Q codes (no S4, no smooth=q)");
  static_assert(!S4 || INT4, "prefill_int8: the packed form (S4) holds qk=int4 codes");
  static_assert(!FP8QK || (WG && !INT4), "prefill_int8: e4m3 Q / K codes (FP8QK) take the wgmma form and no int4 codes");
  static_assert(!(KBLOCK && QSMOOTH), "prefill_int8: KBLOCK folds K's scale into the row factor; smooth=q adds ΔS in scaled units");
  static_assert(!(S4 && WG), "prefill_int8: the packed-int4 Q·K^T (S4) exists in the mma.sync form only");
  static_assert(!(QSMOOTH && WG), "prefill_int8: Q smoothing exists in the mma.sync form only");
  static_assert(!(QSMOOTH && S4), "prefill_int8: Q smoothing's ΔS mma reads int8 K tiles (no S4)");
  static_assert(BM % kQMeanBlock == 0, "prefill_int8: bm must be a whole number of Q-mean blocks");
  static_assert(PV == Fmt::int8 || PV == Fmt::fp16 || PV == Fmt::fp8e4m3, "prefill_int8: pv must be int8, fp16 or fp8e4m3");
  static_assert(PV == Fmt::fp16 ? V_GRAN == Gran::none
                                : (V_GRAN == Gran::per_channel || (PV == Fmt::int8 && V_GRAN == Gran::per_tensor)),
                "prefill_int8: V scale must be per_tensor or per_channel (int8), per_channel (fp8), none (fp16)");
  static_assert(PV != Fmt::fp16 || !WG, "prefill_int8: the wgmma form runs int8 and fp8 P·V (pv=fp16: mma.sync)");
  static_assert(ACC == Accum::fp32 || (ACC == Accum::fp16 && PV == Fmt::fp16 && OUT == Fmt::fp16) ||
                    (ACC == Accum::two_level && PV == Fmt::fp8e4m3),
                "prefill_int8: accum=fp16 needs pv=fp16 with fp16 V, accum=two_level needs pv=fp8e4m3");
  static_assert(OUT == Fmt::fp16 || OUT == Fmt::bf16, "prefill_int8: output must be fp16 or bf16");
  static_assert(!TMA || (WG && PV != Fmt::fp16 && (D == 64 || D == 128)),
                "prefill_int8: TMA loads (one swizzle atom per K row) exist in the wgmma form at d 64 and 128");
  static_assert(!WS || (TMA && QF == Gran::none),
                "prefill_int8: the warp-specialized form (WS) loads by TMA and reads a pre-quantized Q");
  static_assert(!PERSISTENT || WS, "prefill_int8: persistent CTAs (PERSISTENT) are a form of the warp-specialized entry (WS)");
