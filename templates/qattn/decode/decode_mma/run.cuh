// Part of decode::Kernel, included inside its class body by decode_mma.cuh (so it uses the
// kernel's constants and types directly).
// The CTA's setup and the two main loops: chunks of cache rows (every format but flashq) and
// FlashQ blocks.
 // The CTA's place in the grid (abi.h, DecodeParams): split x, KV head and row block y, sequence z.
  struct Cta {
    int warp, lane, split, b, h, row0, gqa, rows, len, start, end;
  };

  // Fills c; false when the CTA has nothing to do: its split starts past the sequence (the combine
  // kernel reads only the splits that hold tokens), or it is the exact pass after a unified-max one
  // (fallback_only) and none of its rows is flagged.
  static __device__ __forceinline__ bool setup(const DecodeParams& p, Cta& c) {
    c.warp = threadIdx.x / 32;
    c.lane = threadIdx.x % 32;
    c.split = blockIdx.x;
    c.b = blockIdx.z;
    c.gqa = p.heads_q / p.heads_kv;
    c.rows = c.gqa * p.q_len;
    const int row_blocks = (c.rows + BM - 1) / BM;
    c.h = blockIdx.y / row_blocks;
    c.row0 = (blockIdx.y % row_blocks) * BM;
    c.len = p.kv_lens[c.b];
    c.start = c.split * p.split_tokens;
    if (c.start >= c.len) return false;
    c.end = min(c.len, c.start + p.split_tokens);
    if constexpr (SMX == SoftmaxMode::exact)
      if (p.fallback_only) {
        const int r = c.row0 + int(threadIdx.x);
        bool flagged = false;
        if (threadIdx.x < BM && r < c.rows)
          flagged = p.row_flags[((long long)c.b * p.heads_q + c.h * c.gqa + r % c.gqa) * p.q_len + r / c.gqa] != kUmSeen;
        if (!__syncthreads_or(flagged)) return false;
      }
    return true;
  }

  static __device__ __forceinline__ void init_state(const DecodeParams& p, Softmax& st) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int c = 0; c < kOC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][c][e] = 0.f;
      st.m[mt][0] = st.m[mt][1] = dev::neg_inf();
      st.l[mt][0] = st.l[mt][1] = 0.f;
      st.v_shift[mt][0] = st.v_shift[mt][1] = 0.f;
    }
    st.phi2 = p.um_phi2;
  }

  // Every format but flashq: chunks of BN cache rows.
  static __device__ void run_rows(const DecodeParams& p, char* smem) {
    Cta c;
    if (!setup(p, c)) return;
    const int warp = c.warp, lane = c.lane, b = c.b, h = c.h, row0 = c.row0, gqa = c.gqa, len = c.len;
    const int n_chunks = (c.end - c.start + BN - 1) / BN;
    const int my_chunks = warp < n_chunks ? (n_chunks - warp + WARPS - 1) / WARPS : 0;
    // Tokens every row of this CTA may see; chunks reaching past it need the mask.
    const int seen_by_all = CAUSAL ? min(len, len - p.q_len + 1 + row0 / gqa) : len;
    // The 8-row groups that hold query rows: a GQA group of 4 with one new token fills one of a bm 16
    // tile's two, and the scaling and softmax of the other are skipped.
    const int live = min(2 * kMT, (c.rows - row0 + 7) / 8);

    const u32 pipe = dev::smem_addr(smem) + warp * kWarpPipeBytes;
    const char* pipe_ptr = smem + warp * kWarpPipeBytes;   // the same memory, for plain loads
    auto chunk_t0 = [&](int i) { return c.start + (warp + i * WARPS) * BN; };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < my_chunks) Loader::load_chunk(p, pipe + i * 2 * kChunkBytes, pipe + i * 2 * kChunkBytes + kChunkBytes, b, h,
                                    chunk_t0(i), len, lane);
      dev::cp_async_commit();
    }

    u32 qa[kMT][kSteps][4];
    float q_sum[kMT][2];
    load_q(p, qa, q_sum, b, h, row0, c.rows, lane);
    float scale_log2 = p.softmax_scale * dev::kLog2e;
    if constexpr (KV == Fmt::fp8e4m3) scale_log2 *= p.k_head_scale[h] * dev::kE4m3HalfFactor;

    // ldmatrix.trans row addresses of the V tiles (see prefill_fp16.cuh): lanes 8i..8i+7 address
    // tile i = (tokens 0-7 | 8-15) x (channels 0-7 | 8-15).
    u32 v_lane[4];
    {
      const int v_row = lane % 8 + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) v_lane[j] = u32(v_row * kOC + ((2 * j + lane / 16) ^ (lane % 8))) * 16u;
    }

    Softmax st;
    init_state(p, st);
    for (int i = 0; i < my_chunks; ++i) {
      {
        const int next = i + STAGES - 1;
        const u32 dst = pipe + (next % STAGES) * 2 * kChunkBytes;
        if (next < my_chunks) Loader::load_chunk(p, dst, dst + kChunkBytes, b, h, chunk_t0(next), len, lane);
        dev::cp_async_commit();
      }
      dev::cp_async_wait<STAGES - 1>();
      __syncwarp();
      const int t0 = chunk_t0(i);
      const u32 k_tile = pipe + (i % STAGES) * 2 * kChunkBytes;
      const char* k_ptr = pipe_ptr + (i % STAGES) * 2 * kChunkBytes;
      const u32 v_tile = k_tile + kChunkBytes;
      if constexpr (!kQuant) zero_tail_rows(v_tile, t0, len, lane);
      float s[kMT][kNT][4];
      qk_product(s, qa, k_ptr, scale_log2, q_sum, lane, live);
      if (t0 + BN > seen_by_all) apply_mask(s, t0, len, row0, gqa, p.q_len, lane);
      softmax_update(s, st, live);
      if constexpr (kFoldV) fold_v_scales(s, st, k_ptr + kChunkBytes, t0, len, lane, live);
      if constexpr (kQuant) {
        pv_product_quant(s, st, k_ptr + kChunkBytes, t0, len, lane);
      } else {
        __syncwarp();   // zeroed rows visible to the whole warp
        pv_product(s, st, v_tile, v_lane);
      }
      __syncwarp();   // every lane is done with this stage before it is refilled
    }
    dev::cp_async_wait_all();
    if constexpr (KV == Fmt::fp8e4m3) scale_output(st, p.v_head_scale[h] * dev::kE4m3HalfFactor);
    __syncthreads();   // the pipeline memory becomes the merge area
    finish(p, st, smem, b, h, c.split, row0, c.rows, warp, lane);
  }

  // flashq: chunks of one 64-token block (split_tokens and kv_lens are multiples of 64), KB / VB bits.
  template <int KB, int VB>
  static __device__ void run_blocks(const DecodeParams& p, char* smem) {
    Cta c;
    if (!setup(p, c)) return;
    const int warp = c.warp, lane = c.lane, b = c.b, h = c.h;
    constexpr int kBlock = kv::kFlashQBlock;
    const int first_block = c.start / kBlock, n_chunks = (c.end - c.start) / kBlock;
    const int my_chunks = warp < n_chunks ? (n_chunks - warp + WARPS - 1) / WARPS : 0;
    const int off_k = p.fq_heads[2 * h + 1], off_v = p.fq_heads[2 * (p.heads_kv + h) + 1];

    constexpr int kStage = 2 * kFqStage, kPipe = STAGES * kStage;
    const u32 pipe = dev::smem_addr(smem) + warp * kPipe;
    const char* pipe_ptr = smem + warp * kPipe;
    u32* table_k = reinterpret_cast<u32*>(smem + WARPS * kPipe + warp * 2 * D * 4);
    u32* table_v = table_k + D;
    auto block_of = [&](int i) { return first_block + warp + i * WARPS; };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
      if (i < my_chunks) dev::flashq_load_block<D, PAGED, KB, VB>(p, pipe + i * kStage, pipe + i * kStage + kFqStage, b, block_of(i), off_k, off_v, lane);
      dev::cp_async_commit();
    }

    u32 qa[kMT][kSteps][4];
    float q_sum[kMT][2];
    load_q<KB>(p, qa, q_sum, b, h, c.row0, c.rows, lane);
    const float scale_log2 = p.softmax_scale * dev::kLog2e;

    Softmax st;
    init_state(p, st);
    for (int i = 0; i < my_chunks; ++i) {
      {
        const int next = i + STAGES - 1;
        const u32 dst = pipe + (next % STAGES) * kStage;
        if (next < my_chunks) dev::flashq_load_block<D, PAGED, KB, VB>(p, dst, dst + kFqStage, b, block_of(next), off_k, off_v, lane);
        dev::cp_async_commit();
      }
      dev::cp_async_wait<STAGES - 1>();
      __syncwarp();
      const char* k_block = pipe_ptr + (i % STAGES) * kStage;
      const char* v_block = k_block + kFqStage;
      dev::flashq_param_table<D>(k_block, table_k, lane);
      dev::flashq_param_table<D>(v_block, table_v, lane);
      __syncwarp();
      const float alpha_v = dev::flashq_alpha(v_block);
#pragma unroll 1
      for (int r0 = 0; r0 < kBlock; r0 += BN) {
        float s[kMT][kNT][4];
        fq_qk_product<KB>(s, qa, k_block, table_k, r0, scale_log2, lane);
        softmax_update(s, st);
        scale_scores(s, alpha_v);
        fq_pv_product<VB>(s, st, v_block, table_v, r0, lane);
      }
      __syncwarp();   // every lane is done with this stage and the tables before they are refilled
    }
    dev::cp_async_wait_all();
    __syncthreads();   // the pipeline memory becomes the merge area
    finish(p, st, smem, b, h, c.split, c.row0, c.rows, warp, lane);
  }

 public:
