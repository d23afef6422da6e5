// FP16 / BF16 FlashAttention-2 prefill: the unquantized baseline every quantized kernel is measured
// against. O = softmax(softmax_scale * Q K^T + mask) V per (batch, query head), GQA, optional causal
// mask (bottom-right aligned), optional natural-log LSE. Valid tilings: see prefill_fp16_shape.h.
//
// One CTA owns BM query rows of one (batch, head); each warp owns 16*MT of them (MT in {1, 2}) and
// keeps its O rows in fp32 registers for the whole KV sweep, so the online softmax never needs an
// inter-warp reduction. Per KV tile (BN keys):
//   S = Q K^T   mma.sync m16n8k16, fp32 accumulate; Q and K fragments by ldmatrix from swizzled smem
//   online softmax in base 2 (log2(e) folded into the scale, one FFMA + one MUFU.EX2 per score)
//   O += P V    P straight from the S registers (C layout == A layout), V fragments by ldmatrix.trans
// K and V tiles travel in separate cp.async groups so that V(j) loads during Q*K(j)^T and K(j+s)
// during P*V(j). KV tiles are visited last to first: the only tiles that need a mask (the ragged
// tail and, when causal, the diagonal) come first, and tiles past the diagonal are never loaded.
#pragma once
#include "qattn/abi.h"
#include "qattn/attention/prefill_fp16_shape.h"
#include "qattn/attention/tile_order.h"
#include "qattn/common/common.cuh"

namespace qattn::prefill_fp16 {

// VARLEN: packed sequences of their own lengths (AttentionParams::cu_q / cu_kv).
template <Fmt IO, int D, bool CAUSAL, int BM, int BN, int WARPS, int STAGES, bool VARLEN = false>
struct Kernel {
  static_assert(IO == Fmt::fp16 || IO == Fmt::bf16, "prefill_fp16: IO must be fp16 or bf16");
  static_assert(tiling_ok(D, BM, BN, WARPS, STAGES), "prefill_fp16: unsupported tiling (see prefill_fp16_shape.h)");

  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = smem_bytes(D, BM, BN, STAGES, 2);

 private:
  using u16 = dev::u16;
  using u32 = dev::u32;

  static constexpr int kRowsPerWarp = BM / WARPS;
  static constexpr int kMTiles = kRowsPerWarp / 16;   // m16 tiles per warp
  static constexpr int kChunks = D / 8;               // 16-byte chunks per row (== n8 tiles of O)
  static constexpr int kNTiles = BN / 8;              // n8 tiles of S
  static constexpr int kQKSteps = D / 16;             // k16 steps of Q K^T
  static constexpr int kPVSteps = BN / 16;            // k16 steps of P V
  // A cp.async pass of the CTA covers kRowsPerPass whole rows with kLoadsPerPass 16-byte chunks per
  // thread: 1 when the row's chunks divide the threads (d = 64, 128, 256), 3 at d = 96 (12 chunks).
  static constexpr int kLoadsPerPass = kChunks / gcd(kThreads, kChunks);
  static constexpr int kRowsPerPass = rows_per_pass(D, WARPS);
  // Per-lane ldmatrix addresses: logical chunks c and c + kSpan share a swizzle key, so a lane keeps
  // kSpan / 2 addresses (one per chunk pair of a span) and reaches the others by immediate offsets.
  static constexpr int kSpan = dev::swizzle_span<kChunks>();
  static constexpr int kLaneAddrs = kSpan / 2;
  static constexpr u32 kSpanBytes = kSpan * 16;
  static constexpr u32 kQBytes = BM * D * 2;
  static constexpr u32 kTileBytes = BN * D * 2;
  // Groups in flight that may stay pending when the oldest one is needed (see the main loop).
  static constexpr int kPendingGroups = 2 * STAGES - 2;

  // Per-warp running state of the online softmax, for the two rows (g, g+8) of each m16 tile.
  struct RowState {
    float o[kMTiles][kChunks][4];
    float m[kMTiles][2];   // running max of the raw (unscaled) scores
    float l[kMTiles][2];   // this thread's partial row sum (summed over the quad at the end)
  };

  // Copies `ROWS` rows of D elements starting at global row `row0` into a swizzled smem tile; rows
  // at or past `row_limit` become zeros. The source pointer advances one pass of rows at a time
  // rather than being recomputed per row. Unrolled by 4: fully unrolled, ptxas
  // keeps every row's 64-bit address live and the main loop, at the 255-register cap, spills on
  // some tilings; rolled, the loop overhead costs throughput. With kLoadsPerPass > 1 (d = 96)
  // each of a thread's chunks of a pass gets its own sweep over the passes.
  template <int ROWS>
  static __device__ __forceinline__ void load_rows(u32 dst, const u16* base, long long row_stride,
                                                   int row0, int row_limit, int tid) {
    static_assert(ROWS % kRowsPerPass == 0, "tile rows must be a multiple of rows per pass");
#pragma unroll
    for (int l = 0; l < kLoadsPerPass; ++l) {
      const int chunk = (tid + l * kThreads) % kChunks;
      const int r0 = (tid + l * kThreads) / kChunks;
      const u16* src = base + (row0 + r0) * row_stride + chunk * 8;
      const long long pass_stride = kRowsPerPass * row_stride;
#pragma unroll 4
      for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
        const int row = r0 + i * kRowsPerPass;
        const bool valid = row0 + row < row_limit;
        dev::cp_async_16(dst + dev::swizzled_offset<kChunks>(row, chunk), valid ? src : base, valid);
        src += pass_stride;
      }
    }
  }

  // S = Q K^T for this warp's rows and one KV tile (fp32, unscaled).
  static __device__ __forceinline__ void qk_product(float (&s)[kMTiles][kNTiles][4], const u32 (&q_lane)[kLaneAddrs],
                                                    const u32 (&k_lane)[kLaneAddrs]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kQKSteps; ++ks) {
      u32 qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        dev::ldmatrix_x4(qa[mt], q_lane[ks % kLaneAddrs] + (ks / kLaneAddrs) * kSpanBytes + mt * 16 * kChunks * 16);
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        u32 kb[4];
        dev::ldmatrix_x4(kb, k_lane[ks % kLaneAddrs] + (ks / kLaneAddrs) * kSpanBytes + np * 16 * kChunks * 16);
        const u32 b0[2] = {kb[0], kb[1]};
        const u32 b1[2] = {kb[2], kb[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          dev::mma_m16n8k16_f32<IO>(s[mt][2 * np], qa[mt], b0);
          dev::mma_m16n8k16_f32<IO>(s[mt][2 * np + 1], qa[mt], b1);
        }
      }
    }
  }

  // Sets masked scores to -inf: keys at or past kv_len and, when causal, keys after the diagonal.
  static __device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kNTiles][4], int key0, int row0,
                                                    int kv_len, int causal_off, int lane) {
    const float ninf = dev::neg_inf();
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + lane / 4 + half * 8;
        const int key_limit = CAUSAL ? min(kv_len, row + causal_off + 1) : kv_len;   // keys < limit are seen
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + nt * 8 + (lane % 4) * 2 + e;
            if (key >= key_limit) s[mt][nt][half * 2 + e] = ninf;
          }
      }
  }

  // Online softmax update: new running max, rescale of O and l, scores replaced by probabilities.
  static __device__ __forceinline__ void softmax_update(float (&s)[kMTiles][kNTiles][4], RowState& st,
                                                        float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = st.m[mt][half];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][half * 2], s[mt][nt][half * 2 + 1]));
        mx = dev::quad_max(mx);
        // A row that has seen only masked keys keeps max -inf; subtracting 0 instead keeps
        // exp2(-inf - (-inf)) = NaN out, and its probabilities stay exactly 0.
        const float m_scaled = mx == dev::neg_inf() ? 0.f : mx * scale_log2;
        const float alpha = dev::exp2_approx(st.m[mt][half] * scale_log2 - m_scaled);
        st.m[mt][half] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = dev::exp2_approx(fmaf(s[mt][nt][half * 2 + e], scale_log2, -m_scaled));
            s[mt][nt][half * 2 + e] = pr;
            sum += pr;
          }
        st.l[mt][half] = st.l[mt][half] * alpha + sum;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          st.o[mt][c][half * 2] *= alpha;
          st.o[mt][c][half * 2 + 1] *= alpha;
        }
      }
  }

  // O += P V, with P (already probabilities) converted to IO and fed from registers.
  static __device__ __forceinline__ void pv_product(const float (&s)[kMTiles][kNTiles][4], RowState& st,
                                                    const u32 (&v_lane)[kLaneAddrs]) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      u32 pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = dev::pack2<IO>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = dev::pack2<IO>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = dev::pack2<IO>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = dev::pack2<IO>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kChunks / 2; ++dp) {
        u32 vb[4];
        dev::ldmatrix_x4_trans(vb, v_lane[dp % kLaneAddrs] + (dp / kLaneAddrs) * kSpanBytes + kk * 16 * kChunks * 16);
        const u32 b0[2] = {vb[0], vb[1]};
        const u32 b1[2] = {vb[2], vb[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          dev::mma_m16n8k16_f32<IO>(st.o[mt][2 * dp], pa[mt], b0);
          dev::mma_m16n8k16_f32<IO>(st.o[mt][2 * dp + 1], pa[mt], b1);
        }
      }
    }
  }

  // A lane's ldmatrix addresses in the K or V tile at `tile`. Brace-initialised rather than a loop: at
  // d = 64 and 128 this keeps the instruction order (and so the ptxas schedule) the kernel was tuned with.
  struct LaneAddrs {
    u32 a[kLaneAddrs];
  };
  static __device__ __forceinline__ LaneAddrs tile_addrs(u32 tile, const u32 (&lane)[kLaneAddrs]) {
    if constexpr (kLaneAddrs == 4) return {{tile + lane[0], tile + lane[1], tile + lane[2], tile + lane[3]}};
    else return {{tile + lane[0], tile + lane[1]}};
  }

  // VARLEN: the LSE of row `row` of sequence b, head h, in the packed [total_q, h_q] layout (the sequence's
  // first row read again rather than kept in a register through the main loop, which runs at the cap).
  static __device__ __forceinline__ long long packed_lse(const AttentionParams& p, int b, int h, int row) {
    return static_cast<long long>(p.cu_q[b] + row) * p.heads_q + h;
  }

  // A CTA whose rows see no key at all (causal with q_len > kv_len): O = 0, LSE = -inf.
  static __device__ void write_empty(const AttentionParams& p, u16* o_base, int m0, int b, int h, int q_len, int tid) {
    const int rows = min(BM, (VARLEN ? q_len : p.q_len) - m0);
    const dev::U32x4 zero = {0u, 0u, 0u, 0u};
    for (int i = tid; i < rows * kChunks; i += kThreads)
      dev::st_global_16(o_base + (m0 + i / kChunks) * p.o.ss + (i % kChunks) * 8, zero);
    if (p.lse != nullptr)
      for (int r = tid; r < rows; r += kThreads) {
        if constexpr (VARLEN) p.lse[packed_lse(p, b, h, m0 + r)] = dev::neg_inf();
        else p.lse[((long long)b * p.heads_q + h) * p.q_len + m0 + r] = dev::neg_inf();
      }
  }

 public:
  static __device__ void run(const AttentionParams& p, char* smem) {
    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    // Causal: each head's last query blocks (the most KV tiles) first (tile_order.h: by_head).
    const tile_order::Slot slot =
        tile_order::this_cta<CAUSAL ? tile_order::Order::by_head : tile_order::Order::in_order>(p.heads_q);
    const int m_block = slot.q_tile, h = slot.h, b = slot.b;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    // VARLEN: the sequence's rows, cut to the call's bounds as in the int8 kernel.
    const int q_row0 = VARLEN ? p.cu_q[b] : 0, kv_row0 = VARLEN ? p.cu_kv[b] : 0;
    const int q_len = VARLEN ? min(p.cu_q[b + 1] - q_row0, p.q_len) : p.q_len;
    const int kv_len = VARLEN ? min(p.cu_kv[b + 1] - kv_row0, p.kv_len) : p.kv_len;
    const int m0 = m_block * BM;
    if (VARLEN && m0 >= q_len) return;   // past this sequence's queries
    const int causal_off = kv_len - q_len;   // query i sees keys j <= i + causal_off

    const u16* q_base = static_cast<const u16*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    const u16* k_base = static_cast<const u16*>(p.k.ptr) + b * p.k.sb + h_kv * p.k.sh;
    const u16* v_base = static_cast<const u16*>(p.v.ptr) + b * p.v.sb + h_kv * p.v.sh;
    u16* o_base = static_cast<u16*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
    if constexpr (VARLEN) {
      q_base += q_row0 * p.q.ss;
      k_base += kv_row0 * p.k.ss;
      v_base += kv_row0 * p.v.ss;
      o_base += q_row0 * p.o.ss;
    }

    int n_tiles = (kv_len + BN - 1) / BN;
    if (CAUSAL) {
      const int last_key = min(q_len, m0 + BM) - 1 + causal_off;
      n_tiles = last_key < 0 ? 0 : min(n_tiles, last_key / BN + 1);
    }
    if (n_tiles == 0) {
      write_empty(p, o_base, m0, b, h, q_len, tid);
      return;
    }

    const u32 q_smem = dev::smem_addr(smem);
    const u32 k_smem = q_smem + kQBytes;
    const u32 v_smem = k_smem + STAGES * kTileBytes;

    // Iteration `it` works on KV tile n_tiles-1-it out of stage it % STAGES.
    auto issue_k = [&](int it) {
      if (it < n_tiles)
        load_rows<BN>(k_smem + (it % STAGES) * kTileBytes, k_base, p.k.ss, (n_tiles - 1 - it) * BN, kv_len, tid);
      dev::cp_async_commit();
    };
    auto issue_v = [&](int it) {
      if (it < n_tiles)
        load_rows<BN>(v_smem + (it % STAGES) * kTileBytes, v_base, p.v.ss, (n_tiles - 1 - it) * BN, kv_len, tid);
      dev::cp_async_commit();
    };

    // Commit groups in order: G0 = Q + K(0), G1 = V(0), G2 = K(1), ...; G(2it) = K(it), G(2it+1) = V(it).
    load_rows<BM>(q_smem, q_base, p.q.ss, m0, q_len, tid);
    issue_k(0);
#pragma unroll
    for (int g = 1; g <= 2 * STAGES - 2; ++g) {
      if (g % 2) issue_v(g / 2);
      else issue_k(g / 2);
    }

    // Per-lane ldmatrix addresses. Lanes 8i..8i+7 address the 8 rows of tile i of an x4 load, so a
    // lane's rows always have row % 8 == lane % 8 and its physical chunk for logical chunk 2j + c0
    // is (2j + c0) ^ swizzle_key(lane % 8). Kept as addr[j % kLaneAddrs] + kSpanBytes * (j / kLaneAddrs),
    // only four (d = 96: two) addresses per operand stay live (the rest are immediate offsets)
    // instead of one per k-step.
    //   Q (A operand): tiles (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
    //   K (B, [key][d]): tiles (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), (keys 8-15, k 8-15)
    //   V (B, .trans of [key][d]): tiles (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15)
    const int row_in_warp = warp * kRowsPerWarp;
    u32 q_lane[kLaneAddrs], k_lane[kLaneAddrs], v_lane[kLaneAddrs];
    {
      const int q_c0 = lane / 16, k_c0 = (lane / 8) % 2, v_c0 = lane / 16;
      const u32 q_row = q_smem + (row_in_warp + lane % 8 + ((lane / 8) % 2) * 8) * kChunks * 16;
      const u32 k_row = (lane % 8 + (lane / 16) * 8) * kChunks * 16;
      const u32 v_row = (lane % 8 + ((lane / 8) % 2) * 8) * kChunks * 16;
#pragma unroll
      for (int j = 0; j < kLaneAddrs; ++j) {
        const int key = kSpan == 8 ? lane % 8 : (lane % 8) / 2;   // dev::swizzle_key of this lane's rows
        q_lane[j] = q_row + u32((2 * j + q_c0) ^ key) * 16;
        k_lane[j] = k_row + u32((2 * j + k_c0) ^ key) * 16;
        v_lane[j] = v_row + u32((2 * j + v_c0) ^ key) * 16;
      }
    }

    RowState st;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][c][e] = 0.f;
      st.m[mt][0] = st.m[mt][1] = dev::neg_inf();
      st.l[mt][0] = st.l[mt][1] = 0.f;
    }

    const float scale_log2 = p.softmax_scale * dev::kLog2e;
    const int warp_row0 = m0 + row_in_warp;                    // first query row of this warp
    const int warp_row_last = min(q_len, warp_row0 + kRowsPerWarp) - 1;
    const bool warp_has_rows = warp_row0 < q_len;

    for (int it = 0; it < n_tiles; ++it) {
      const int stage = it % STAGES;
      const int key0 = (n_tiles - 1 - it) * BN;
      // A warp skips the math of a tile none of its rows can see (above the causal diagonal, or
      // rows past q_len), but always takes part in the loads and barriers.
      const bool warp_sees_tile = warp_has_rows && (!CAUSAL || key0 <= warp_row_last + causal_off);
      const bool need_mask = key0 + BN > kv_len || (CAUSAL && key0 + BN - 1 > warp_row0 + causal_off);

      // K(it) has landed once at most kPendingGroups younger groups are pending.
      dev::cp_async_wait<kPendingGroups>();
      __syncthreads();
      issue_v(it + STAGES - 1);   // into the V stage every thread finished reading last iteration
      float s[kMTiles][kNTiles][4];
      if (warp_sees_tile) {
        const u32 k_tile = k_smem + stage * kTileBytes;
        qk_product(s, q_lane, tile_addrs(k_tile, k_lane).a);
        if (need_mask) apply_mask(s, key0, warp_row0, kv_len, causal_off, lane);
        softmax_update(s, st, scale_log2);
      }

      dev::cp_async_wait<kPendingGroups>();
      __syncthreads();
      issue_k(it + STAGES);       // into the K stage every thread finished reading above
      if (warp_sees_tile) {
        const u32 v_tile = v_smem + stage * kTileBytes;
        pv_product(s, st, tile_addrs(v_tile, v_lane).a);
      }
    }
    dev::cp_async_wait_all();   // only empty groups remain; keeps the count balanced for tools

    // Epilogue: normalise, stage this warp's O rows in its own (no longer needed) Q rows, then
    // write whole 16-byte chunks to global memory.
    const int g = lane / 4, t = lane % 4;
    // VARLEN: the sequence's length read again (not held in a register through the main loop).
    const int q_rows = VARLEN ? min(p.cu_q[b + 1] - p.cu_q[b], p.q_len) : q_len;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float l = dev::quad_sum(st.l[mt][half]);
        const float inv_l = l > 0.f ? 1.f / l : 0.f;
        const int row = row_in_warp + mt * 16 + g + half * 8;   // row inside the CTA tile
        if (p.lse != nullptr && t == 0 && m0 + row < (VARLEN ? q_rows : q_len)) {
          const float lse = l > 0.f ? (st.m[mt][half] * scale_log2 + dev::log2_approx(l)) * dev::kLn2 : dev::neg_inf();
          if constexpr (VARLEN) p.lse[packed_lse(p, b, h, m0 + row)] = lse;
          else p.lse[((long long)b * p.heads_q + h) * q_len + m0 + row] = lse;
        }
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const u32 packed = dev::pack2<IO>(st.o[mt][c][half * 2] * inv_l, st.o[mt][c][half * 2 + 1] * inv_l);
          dev::st_shared_4(q_smem + dev::swizzled_offset<kChunks>(row, c) + t * 4, packed);
        }
      }
    __syncwarp();
    constexpr int kWarpChunks = kRowsPerWarp * kChunks;
#pragma unroll
    for (int i = lane; i < kWarpChunks; i += 32) {
      const int row = row_in_warp + i / kChunks, c = i % kChunks;
      if (m0 + row < (VARLEN ? q_rows : q_len))
        dev::st_global_16(o_base + (m0 + row) * p.o.ss + c * 8,
                          dev::ld_shared_16(q_smem + dev::swizzled_offset<kChunks>(row, c)));
    }
  }
};

}  // namespace qattn::prefill_fp16
