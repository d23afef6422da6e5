// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// Per-format traits: what the P·V format and its accumulation (pv, accum, v_smooth) make of the operands,
// the output accumulator and the row sum. A new P·V format adds its case here.
 private:
  static constexpr bool kIntPV = PV == Fmt::int8;       // P̂ u8 · V̂ int8, int32 O (INT-FlashAttention)
  static constexpr bool kHalfV = PV == Fmt::fp16;       // P fp16/bf16 · V as given (type OUT), row-major
  static constexpr bool kHalfO = ACC == Accum::fp16;    // O as half2 (mma .f16 accumulate)
  // l is the exact sum (fp32 of the unrounded P) for float P·V and for smoothed V; else Σ P̂.
  static constexpr bool kExactSum = !kIntPV || VSMOOTH;
  static constexpr int kVBytes = kHalfV ? 2 : 1;
  // pv=fp16 at d = 256: the fp32 O (128 registers) leaves no room for the Q fragments (32) next to the
  // 16-bit P fragments, so Q·K^T reads them from the resident Q tile every KV tile (8 ldmatrix.x4).
  // (S4 keeps them: packed Q fragments are half as many.)
  static constexpr bool kQInRegs = !(kHalfV && D == 256) || S4;
