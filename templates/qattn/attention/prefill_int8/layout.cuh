// Part of prefill_int8::Kernel, included inside its class body by prefill_int8.cuh (so it uses the
// kernel's constants and types directly).
// Tiling and shared-memory layout: tile shapes, stage offsets, the swizzled Q / K addressing, the
// fragment types and the per-CTA (Ctx) and per-warp (State) state.
 public:
  static_assert(tiling_ok(D, BM, BN, WARPS, STAGES, WG, kVBytes, kHalfO, S4, QSMOOTH),
                "prefill_int8: invalid tiling (see prefill_int8_shape.h)");
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(D, BM, BN, STAGES, WG, kVBytes, S4, QSMOOTH, QF != Gran::none, TMA, WS);

 private:
  using u32 = dev::u32;
  static constexpr int kMT = BM / (16 * WARPS);   // m16 row tiles per warp
  static constexpr int kSN = BN / 8;              // n8 column blocks of S
  static constexpr int kON = D / 8;               // n8 column blocks of O
  static constexpr int kQB = qk_row_bytes(D, S4);   // bytes per Q / K row (S4: d / 2)
  static constexpr int kQKSteps = (kQB + 31) / 32;   // 32-byte steps of Q·K^T (k32 s8 or k64 s4)
  static constexpr int kPVSteps = BN / 32;        // k32 steps of P·V
  // The last KV tile of a CTA whose keys all lie in its first half (causal: every other query tile's
  // diagonal at bm 64, bn 128; ragged kv_len) runs as a half tile: n64 products, half the softmax. Its
  // other half would add exact zeros, so the output is the same. Only where it pays: at d 128 (int8 and
  // fp8) the second copy of the tile step costs more than it saves. So: the TMA form, bn 128, d 64, int8 P·V
  // (the cp.async form and fp8 P·V at d 64 would spill 8 bytes at the 128-register cap with it).
  static constexpr bool kHalfTile = TMA && BN == 128 && D == 64 && kIntPV;
  static constexpr int kDChunks = kQB / 16;       // 16-byte chunks per Q / K row
  // Q and K tiles are stored as kAtoms column blocks ("atoms") of kAtomBytes per row, each a
  // [rows][kAtomBytes] tile swizzled by int8::swizzle: one atom of d bytes at d = 64 and 128, two of
  // 128 at d = 256, three of 32 at d = 96. wgmma needs it (its K-major smem operands have rows of one
  // swizzle atom, 32, 64 or 128 bytes), and ldmatrix reads every layout without bank conflicts.
  // S4 (rows of d / 2 bytes) at d = 96: three atoms of 16 bytes.
  static constexpr int kAtomBytes = kQB % 128 == 0 ? 128 : (kQB % 64 == 0 ? 64 : (kQB % 32 == 0 ? 32 : 16));
  static constexpr int kAtomChunks = kAtomBytes / 16;
  static constexpr int kAtoms = kQB / kAtomBytes;
  static constexpr int kNChunks = BN / 16;        // 16-byte chunks per V^T row
  static constexpr int kKTileBytes = BN * kQB;    // K tile (int8 rows of d bytes, or packed int4 of d / 2)
  static constexpr int kVTileBytes = BN * D * kVBytes;   // V^T (int8, fp8) or V (fp16 / bf16) tile
  // Shared memory (offsets from the base): Q, then per stage K and V^T (and, for mma.sync, the K
  // scales); the wgmma form keeps the scales of all stages after the last stage (1024-byte tiles).
  static constexpr int kStageBytes = kKTileBytes + kVTileBytes + (WG ? 0 : 4 * BN);
  static __device__ __forceinline__ int k_off(int slot) { return BM * kQB + slot * kStageBytes; }
  static __device__ __forceinline__ int v_off(int slot) { return k_off(slot) + kKTileBytes; }
  static __device__ __forceinline__ int scale_off(int slot) {
    return WG ? BM * kQB + STAGES * kStageBytes + slot * 4 * BN : k_off(slot) + kKTileBytes + kVTileBytes;
  }
  // Address of 16-byte chunk `chunk` of row `row` in the Q or K tile of ROWS rows at `tile` (see
  // kAtomBytes). Summed left to right as the d = 64 / 128 kernels always did (same code as before).
  template <int ROWS>
  static __device__ __forceinline__ u32 qk_addr(u32 tile, int row, int chunk) {
    if constexpr (kAtomChunks == 1) return tile + chunk * (ROWS * 16) + row * 16;   // S4, d = 96
    else if constexpr (kAtoms == 1) return tile + row * kQB + int8::swizzle<kDChunks>(row, chunk) * 16;
    else
      return tile + (chunk / kAtomChunks) * (ROWS * kAtomBytes) + row * kAtomBytes +
             int8::swizzle<kAtomChunks>(row, chunk % kAtomChunks) * 16;
  }

  // S accumulators. mma.sync form: biased (they start at kMagicBits, so the int32 reads as a float
  // with no conversion: sm_80's I2F is a quarter-rate op). wgmma form: raw (the first product ignores
  // the old values, so no per-tile initialisation) and converted with I2FP, which sm_90 runs at the
  // rate of plain ALU ops (so cheaper there than the biased start's extra initialisation).
  // qk=int4 (INT4, either form) takes raw S too, zeroed before the first mma.sync and converted with
  // I2F: the biased start's -kMagic · k_scale bias rounds in fp32 by up to ~0.75 · k_scale, a code
  // product's worth of error that is nothing next to int8's 127² range but a third of a step with int4's
  // 7² (enough to push causal rows' LSE past the quantization's own bound).
  static constexpr bool kRawS = WG || INT4;
  // FP8QK: the e4m3 products accumulate in fp32, so S is a float and needs no conversion at all.
  using Scores = typename Pick<FP8QK, float[kMT][kSN][4], int[kMT][kSN][4]>::type;
  using Logits = float[kMT][kSN][4];    // u = S · k_scale (KBLOCK: u = S, k_scale is in RowFac)
  using RowVals = float[kMT][2];        // one value per row: rows g and g + 8 of each m16 tile
  // Per row and 32-key step ps, the factor from u to the base-2 logit: q_scale · softmax_scale · log2 e
  // (st.qs), times the step's K scale with KBLOCK.
  using RowFac = float[kMT][2][kPVSteps];

  // Sequence b's lengths and, for packed variable-length input (VARLEN), the first row of its queries
  // and keys in the caller's tensors (AttentionParams::cu_q / cu_kv); dense input: the call's lengths,
  // read from the parameters at each use (as constant-bank operands, not registers held through the loop).
  // A sequence longer than the call's bounds is cut to them: the runtime's workspaces hold no more.
  struct Span {
    const AttentionParams& p;
    int q, kv, q0, kv0;   // VARLEN only
    __device__ __forceinline__ int q_len() const { return VARLEN ? q : p.q_len; }
    __device__ __forceinline__ int kv_len() const { return VARLEN ? kv : p.kv_len; }
    __device__ __forceinline__ int q_row0() const { return VARLEN ? q0 : 0; }
    __device__ __forceinline__ int kv_row0() const { return VARLEN ? kv0 : 0; }
  };
  static __device__ __forceinline__ Span span_of(const AttentionParams& p, int b) {
    if constexpr (VARLEN) {
      const int q_row0 = p.cu_q[b], kv_row0 = p.cu_kv[b];
      return Span{p, min(p.cu_q[b + 1] - q_row0, p.q_len), min(p.cu_kv[b + 1] - kv_row0, p.kv_len), q_row0, kv_row0};
    } else {
      return Span{p, 0, 0, 0, 0};
    }
  }

  // Per-CTA addressing, resolved once.
  struct Ctx {
    const signed char* k;   // K of (b, h_kv)
    const signed char* v;   // V^T of (b, h_kv)
    const float* k_scale;   // K scales of (b, h_kv)
    long long k_ss, v_sc;
    int k_group, kv_len, q_len, causal_offset;
    bool check_lq;          // a row can reach the overflow guard (more than 30720 or 32768 keys)
    int row0;               // first query row of this warp
    const dev::u16* vh;     // pv=fp16: V (type OUT) of (b, h_kv), rows of v_ss elements
    long long v_ss;
    // TMA: the maps, and where (b, h_kv) starts in them: K's byte column and 16-key group, V^T's row.
    const TmaMap* k_map;
    const TmaMap* v_map;
    int k_col, k_group16, v_row;
  };

  // Per-warp running state; fully unrolled indexing keeps all of it in registers.
  struct State {
    u32 qf[kMT][kQKSteps][4];   // Q A-fragments, loaded once (mma.sync form only)
    // O: the P·V mma accumulators. int8: int32 in units of P̂ · V codes; fp16 / fp8: fp32 (in units
    // of P · V, resp. P̃ · V codes); accum=fp16: half2 pairs (row g, row g + 8 of each m16 tile).
    typename Pick<kHalfO, u32[kMT][kON][2], typename Pick<kIntPV, int[kMT][kON][4], float[kMT][kON][4]>::type>::type o;
    u32 l_q[kMT][2];            // this thread's share of Σ P̂ (not kept with the exact sum)
    float l_x[kMT][2];          // this thread's share of the same sum before rounding
    float r[kMT][2];            // reference max R
    float qs[kMT][2];           // q_scale · softmax_scale · log2(e)
    float dsf[kMT][2];          // QSMOOTH: scale of the row's block mean / q_scale (see Q smoothing)
  };
