// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// The fused-Q prologue (fused_q, tiling _qf): the CTA quantizes its own Q tile.
  // Fused Q (QF != none, tiling _qf): the CTA quantizes its own Q tile from the fp16/bf16 Q (p.q is then
  // the caller's tensor, element strides), as the Q pass would (generator/quant_plan.hpp): per row its abs-max, the
  // max over the row's scale group (per_token: the row; per_warp: 32 consecutive rows; per_thread: rows
  // g, g + 8, g + 16, g + 24 of 32; per_block: 64 rows; all inside the CTA's tile, whose first row is a
  // multiple of bm), scale = amax / qmax, code = round-half-even(x · m) with m = qmax / amax in fp32 (qmax
  // 7 for qk=int4; qk=fp8e4m3: qmax 448 and the code is the e4m3 byte of x · m, bit for bit the Q pass's).
  // Where x / scale is an exact tie (fp16 inputs can make one), the rounded m may put it on the other side:
  // the int code then differs by one from the Q pass's, and is as close to x.
  // The codes go straight into the swizzled int8 Q tile, the group abs-maxes to shared memory
  // (kFusedQOff; run() turns them into st.qs after its barrier). This saves the Q pass (a read and a
  // write of Q through HBM) for a read of the fp16 Q here, overlapping the KV tiles in flight.
  // Each task is one 16-byte chunk of codes: 16 channels, two 16-byte loads; a row's chunks are
  // adjacent tasks. Where a row's chunks fill an aligned group of lanes (d 64 / 128 / 256: 4, 8, 16
  // chunks), its abs-max is a shuffle reduction and per_token needs no barrier at all; d = 96 (6 chunks)
  // gathers it with shared-memory atomics. The codes come from one fma with 1.5 · 2^23 (int8_ptx.cuh's
  // kMagic: the float's low byte is then the rounded code), no float-to-int conversions; |x · qmax /
  // amax| <= qmax, so no clamp. (With conversions and atomics for every d the prologue would cost
  // about half of the Q pass it saves.)
  static constexpr int kFusedQOff = smem_bytes(D, BM, BN, STAGES, false, kVBytes, S4, QSMOOTH);   // after the tiles
  static constexpr int kQMax = FP8QK ? 448 : INT4 ? 7 : 127;
  static constexpr bool kRowShuffle = kDChunks == 4 || kDChunks == 8 || kDChunks == 16;
  static __device__ void quantize_q_tile(const AttentionParams& p, char* smem, u32 sbase, int b, int h, int q0,
                                         const Span& sp) {
    float* row_amax = reinterpret_cast<float*>(smem + kFusedQOff);
    float* group_amax = row_amax + BM;
    const dev::u16* qh = static_cast<const dev::u16*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    if constexpr (VARLEN) qh += sp.q_row0() * p.q.ss;
    constexpr int kTasks = BM * kDChunks, kPer = (kTasks + kThreads - 1) / kThreads;
    static_assert(!kRowShuffle || kTasks % kThreads == 0, "fused Q: whole rows per sweep of the CTA");
    const int tid = threadIdx.x;
    if constexpr (!kRowShuffle)
      for (int r = tid; r < BM; r += kThreads) row_amax[r] = 0.f;
    uint4 raw[kPer][2];
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int task = it * kThreads + tid, r = task / kDChunks, c = task % kDChunks;
      const bool ok = (kTasks % kThreads == 0 || task < kTasks) && q0 + r < sp.q_len();
      const dev::u16* src = qh + (ok ? (q0 + r) * p.q.ss + c * 16 : 0);
      raw[it][0] = ok ? quant::load16(src) : make_uint4(0u, 0u, 0u, 0u);
      raw[it][1] = ok ? quant::load16(src + 8) : make_uint4(0u, 0u, 0u, 0u);
    }
    if constexpr (!kRowShuffle) __syncthreads();   // row_amax zeroed
    float amax[kPer];
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      amax[it] = 0.f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const quant::Vec8 x = quant::unpack8<OUT>(raw[it][half]);
#pragma unroll
        for (int i = 0; i < 8; ++i) amax[it] = fmaxf(amax[it], fabsf(x.v[i]));
      }
      const int task = it * kThreads + tid;
      if constexpr (kRowShuffle) {
        amax[it] = quant::group_max<kDChunks>(amax[it]);
        if (QF != Gran::per_token && task % kDChunks == 0) row_amax[task / kDChunks] = amax[it];
      } else if (kTasks % kThreads == 0 || task < kTasks) {
        quant::atomic_max_nonneg(&row_amax[task / kDChunks], amax[it]);
      }
    }
    if constexpr (QF != Gran::per_token || !kRowShuffle) {
      __syncthreads();
      constexpr int kGroup = QF == Gran::per_block ? 64 : 32;   // Q's groups (quant_slots): per_block 64 rows
      for (int r = tid; r < BM; r += kThreads) group_amax[r] = quant::row_group_max<QF, kGroup>(row_amax, r);
      __syncthreads();
#pragma unroll
      for (int it = 0; it < kPer; ++it) {
        const int task = it * kThreads + tid;
        if (kTasks % kThreads == 0 || task < kTasks) amax[it] = group_amax[task / kDChunks];
      }
    }
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int task = it * kThreads + tid, r = task / kDChunks, c = task % kDChunks;
      if (kTasks % kThreads != 0 && task >= kTasks) continue;
      if (QF == Gran::per_token && kRowShuffle && c == 0) group_amax[r] = amax[it];
      const float mult = quant::code_multiplier(amax[it], static_cast<float>(kQMax));
      u32 w[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const quant::Vec8 x = quant::unpack8<OUT>(raw[it][half]);
        if constexpr (FP8QK) {   // e4m3 bytes of x · m, as the Q pass writes them (same fp32 product)
          w[2 * half] = dev::e4m3x4(x.v[0] * mult, x.v[1] * mult, x.v[2] * mult, x.v[3] * mult);
          w[2 * half + 1] = dev::e4m3x4(x.v[4] * mult, x.v[5] * mult, x.v[6] * mult, x.v[7] * mult);
          continue;
        }
        int code[8];   // the low byte of the float bits is the code
#pragma unroll
        for (int i = 0; i < 8; ++i) code[i] = __float_as_int(fmaf(x.v[i], mult, int8::kMagic));
        w[2 * half] = quant::pack4_s8(code[0], code[1], code[2], code[3]);
        w[2 * half + 1] = quant::pack4_s8(code[4], code[5], code[6], code[7]);
      }
      dev::st_shared_16(qk_addr<BM>(sbase, r, c), dev::U32x4{w[0], w[1], w[2], w[3]});
    }
  }
