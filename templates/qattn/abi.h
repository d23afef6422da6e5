// qattn ABI: the enums and kernel-parameter structs shared by the host library and the JIT-compiled
// device code. Plain C++ (no CUDA types, no includes), so NVRTC compiles it without any CUDA include
// directory and the host includes the very same file: one definition, no drift between the two sides.
//
// Every struct here is passed by value as the single kernel argument; it must stay trivially copyable
// and its layout must not depend on the compiler (only 8-byte pointers/long longs, then 4-byte fields).
#pragma once

namespace qattn {

// Element formats of tensors and scales-free operands.
// flashq: TurboAttention's FlashQ KV cache (INT4/INT2 per channel over 64-token blocks, per-head bit
// width, plus an INT8 buffer of the newest tokens); layout in qattn/decode/kv_layout.h.
enum class Fmt : int { fp16 = 0, bf16 = 1, int8 = 2, int4 = 3, fp8e4m3 = 4, flashq = 5 };

// Scale granularity of a quantized operand.
//   per_tensor: one scale for the whole tensor;  per_block: one scale per block of tokens;
//   per_token: one scale per token (row);         per_channel: one scale per head-dim channel (V);
//   per_warp / per_thread: scale groups that follow the mma fragment layout (SageAttention2);
//   none: the operand is not quantized (fp16/bf16).
//   per_group: (KV cache) per token with 4 groups of head-dim channels, each its own (scale, shift).
//   per_head: (KV cache) one scale per KV head (fp8e4m3 caches).
enum class Gran : int { none = 0, per_tensor = 1, per_block = 2, per_warp = 3, per_thread = 4,
                        per_token = 5, per_channel = 6, per_group = 7, per_head = 8 };

// Decode dataflow for the rows that share a KV head: tensor cores (mma.sync, rows padded to 16) or
// CUDA cores (a GEMV per row, no padding). FlashDecoding++'s inflection point picks between them:
// `automatic` (the spec's default) lets Runtime::decode choose per call from the tuned inflection table
// (include/qattn/inflection.hpp), mma where there is none; a kernel is always one of the other two, and
// an automatic spec compiles as mma (its kernel name carries no flow token, like mma's).
// Linear layers (phase linear, FlashDecoding++'s ImplA/B/C) take the other three: `gemv` (CUDA cores),
// `flat` (a flat GEMM on mma.sync tensor cores, tokens padded to 8 on the mma's narrow side) and `gemm`
// (a tiled GEMM for many tokens), `automatic` choosing by M from the tuned inflection points.
enum class Dataflow : int { mma = 0, gemv = 1, automatic = 2, flat = 3, gemm = 4 };

enum class SoftmaxMode : int { exact = 0, unified_max = 1, sas = 2 };

// Accumulation of the P·V product: fp32 registers, fp16 registers, or a fresh accumulator per KV
// block added into an fp32 total (for tensor cores that accumulate FP8 products with reduced precision).
enum class Accum : int { fp32 = 0, fp16 = 1, two_level = 2 };

// Bit set of smoothing steps applied by the quantizer (SageAttention): K mean, Q block mean, V mean.
enum SmoothBits : int { kSmoothNone = 0, kSmoothK = 1, kSmoothQ = 2, kSmoothV = 4 };

// Addressing of a 4-d tensor: element (b, h, s, c) lives at  b*sb + h*sh + s*ss + c*sc  (in elements).
// [batch, seq, heads, dim] and [batch, heads, seq, dim] are both just stride choices.
struct TensorRef {
  void* ptr;
  long long sb, sh, ss, sc;
};

// Scales of a quantized operand: the scale of token s in (b, h) is
//   ptr[b*sb + h*sh + (group > 0 ? s / group : 0)]          for token-wise granularities, and
//   ptr[b*sb + h*sh + c]                                    for per_channel (c = head-dim channel).
// per_tensor is sb = sh = 0, group = 0. A null ptr means "not quantized".
struct ScaleRef {
  const float* ptr;
  long long sb, sh;
  int group;    // tokens per scale (1 = per token, 64 = per block of 64, 0 = one for all tokens)
  int pad_;
};

// Parameters of a prefill attention kernel.
//  q: [batch, heads_q, q_len, d]  k, v: [batch, heads_kv, kv_len, d]  o: [batch, heads_q, q_len, d]
//  (index order of TensorRef; the memory order is whatever the strides say).
//  For quantized V (int8 / fp8) the quantizer writes V transposed per head, V^T[c][s], with sc the
//  row stride and ss = 1, rows zero-padded to a multiple of kVPadTokens tokens.
//  GQA: query head h reads KV head h / (heads_q / heads_kv).
//  Causal masks are aligned bottom-right: query i sees keys j <= i + (kv_len - q_len).
struct AttentionParams {
  TensorRef q, k, v, o;
  ScaleRef q_scale, k_scale, v_scale;
  const float* v_mean;   // per-channel mean of V added back to O (V smoothing), [b, h_kv, d] contiguous; may be null
  // Q smoothing (smooth=q): the per-channel mean of each block of kQMeanBlock query rows, subtracted from
  // Q before quantization; fp32 [b, h_q, ceil(q_len / kQMeanBlock), d] contiguous. The kernel adds
  // softmax_scale * q_mean(block of row) · k back to every score (before the row max). null = no Q smoothing.
  const float* q_mean;
  float* lse;            // optional natural-log log-sum-exp per row, [b, h_q, q_len] contiguous; may be null
  int batch, heads_q, heads_kv, q_len, kv_len;
  float softmax_scale;   // multiplies Q·K^T before softmax (1/sqrt(d) by default)
  int band_heads;        // causal INT8 wgmma: heads per band of the launch grid (attention/tile_order.h); the
                         // kernel finds its band in the grid, a persistent one (_ps) in the grid it replaces
  int ctas;              // persistent form (_ps): CTAs the host launches (0: one per tile); read by the host only
  // Variable-length batches (spec token `varlen`; null otherwise): sequence b's queries are rows
  // [cu_q[b], cu_q[b + 1]) and its keys rows [cu_kv[b], cu_kv[b + 1]) of the packed tensors the caller
  // passed (sb unused): o, lse (laid out [total_q, heads_q]), and q / k / v wherever the kernel reads the
  // caller's 16-bit tensor (fp16 prefill, fused-Q, pv=fp16's V). Tensors the runtime quantized keep the
  // dense per-sequence layout above, sequence b at index b with zeros past its length. q_len and kv_len are
  // the longest sequence's lengths (they size the grid); the causal mask is aligned at each sequence's end.
  const int* cu_q;
  const int* cu_kv;
};

// Parameters of a quantization kernel: x (fp16/bf16) -> y (int8), scales and optional channel mean.
//  x, y: [batch, heads, seq, d] in TensorRef index order. y may be the transposed V layout (ss = 1).
//  scale: written with the layout described by ScaleRef (scale.ptr is written through a cast).
//  mean: per-channel mean over tokens, [batch, heads, d] contiguous, written when smoothing; may be null.
//  amax_scratch: the passes' scratch, plan.scratch_floats floats (generator/quant_plan.hpp says which
//  to zero first): [0] the per_tensor abs-max, then per-chunk channel statistics when smoothing/per_channel.
struct QuantParams {
  TensorRef x, y;
  ScaleRef scale;
  float* mean;
  float* amax_scratch;
  int batch, heads, seq_len, seq_pad;   // seq_pad: rows of y to write (zeros past seq_len)
  int d;
  float qmax;                            // 127 for int8, 7 for int4
  // Variable-length input (null: dense): sequence b's tokens are rows [cu_seqlens[b], cu_seqlens[b + 1])
  // of x (x.sb unused), at most seq_len of them; y, scale and mean keep their dense per-sequence layouts,
  // and rows past a sequence's own length are treated as rows past seq_len are (codes 0, no scale, not
  // counted in any statistic).
  const int* cu_seqlens;
};

// Parameters of the LSE correction after K smoothing: the attention kernel saw K - mean_k, so its
// log-sum-exp lacks softmax_scale * q·mean_k per row. RowDot computes dot[b, h, i] = q·mean_k when Q is
// quantized (prepare); AddScaled adds softmax_scale * dot to lse after the attention kernel (run).
//  q: the original fp16/bf16 Q [b, h_q, q_len, d] (TensorRef order, sc = 1); k_mean: [b, h_kv, d] and
//  dot, lse: [b, h_q, q_len], contiguous. Rows at -inf stay there.
struct LseCorrectionParams {
  TensorRef q;
  const float* k_mean;
  float* dot;
  float* lse;
  int batch, heads_q, heads_kv, q_len;
  float softmax_scale;
  int pad_;
  // Variable-length Q (null: dense): sequence b's rows are [cu_q[b], cu_q[b + 1]) of q (q.sb unused; at
  // most q_len of them) and lse is laid out [total_q, heads_q]; dot keeps its dense [b, h_q, q_len] layout.
  const int* cu_q;
};

// A KV cache (K or V): the byte layout of qattn/decode/kv_layout.h. Row (b, h, t) lives at
//   ptr + page * page_stride + h * head_stride + slot * row_bytes
// with (page, slot) = (block_table[b * table_stride + t / page_size], t % page_size) for a paged cache
// (block_table != null), else (b, t).
struct KvCacheRef {
  unsigned char* ptr;
  long long page_stride, head_stride;   // bytes
};

// Parameters of the split-K decode kernels (both dataflows): the q_len newest tokens of each sequence
// attend to the kv_lens[b] tokens of its cache (those tokens included), split into ranges of
// split_tokens; grid.x CTAs (one per range) start at range 0 and write partial slot split_base + x.
//  q, o: [batch, heads_q, q_len, d] (TensorRef order, element type spec.out).
//  With splits == 1 the kernel writes o (and lse) itself; otherwise it writes per split the normalised
//  partial output part_o [batch][heads_q][q_len][splits][d] and its log2-sum-exp2 part_lse
//  [batch][heads_q][q_len][splits] (-inf for a split without tokens), and the combine kernel merges.
//  causal (spec): new token i sees cache tokens t <= kv_len - q_len + i; otherwise all kv_len tokens.
//  fp8e4m3:per_head: element = head_scale[h] * e4m3 code (k_head_scale / v_head_scale, [heads_kv]).
//  flashq: fq_heads[(kv * heads_kv + h) * 2 + {0, 1}] = (bits 2|4, byte offset of head h's block in a
//  page) for kv = 0 (K) and 1 (V); page_size is kv::kFlashQBlock.
//  softmax=unified_max (FlashDecoding++): scores in log2 units x2 are exponentiated as 2^(x2 - um_phi2)
//  with no running max; a row's flags word (row_flags[(b * heads_q + hq) * q_len + i], zeroed by the
//  runtime before the call) gets kUmOverflow when an unmasked x2 - um_phi2 >= um_hi2 and kUmSeen when a
//  split saw an unmasked x2 - um_phi2 > um_lo2. A row needs the exact path unless flags == kUmSeen.
//  fallback_only != 0 (an exact kernel run after the unified-max one): CTAs without such a row return
//  at once, and only those rows are written.
struct DecodeParams {
  TensorRef q, o;
  KvCacheRef k, v;
  const int* block_table;   // [batch][table_stride] page ids, or null (contiguous)
  const int* kv_lens;       // [batch] tokens in each sequence's cache (>= q_len)
  float* part_o;
  float* part_lse;
  float* lse;               // optional natural-log LSE [batch, heads_q, q_len]; may be null
  const float* k_head_scale;   // fp8e4m3: [heads_kv]
  const float* v_head_scale;
  const int* fq_heads;      // flashq: [2][heads_kv][2] (bits, byte offset in a page)
  int* row_flags;           // unified_max (and its fallback): [batch * heads_q * q_len]
  int batch, heads_q, heads_kv, q_len;
  int page_size, table_stride;
  int splits, split_tokens; // splits: partial slots per row; split_tokens: a multiple of block_n
  int split_base;           // slot of this launch's first CTA
  int fallback_only;
  float softmax_scale;
  float um_phi2, um_lo2, um_hi2;   // unified_max: phi and the window on x - phi, in log2 units
};

// Flag bits of DecodeParams::row_flags.
constexpr int kUmOverflow = 1;
constexpr int kUmSeen = 2;

// Parameters of the combine kernel (merges the splits of DecodeParams; same fields, same meaning).
// The slots read per row: those of the splits holding tokens, ceil(kv_lens[b] / split_tokens) of the
// first splits - tail_slot, plus with tail_slot = 1 the last slot always (flashq: its INT8 buffer,
// which holds at least the new tokens).
struct DecodeCombineParams {
  TensorRef o;
  const float* part_o;
  const float* part_lse;
  float* lse;
  const int* kv_lens;
  int batch, heads_q, q_len, splits, split_tokens;
  int tail_slot;
};

// Parameters of the append kernel: writes n_new tokens per sequence of x (fp16/bf16,
// [batch, heads_kv, n_new, d] in TensorRef order) into cache rows starting at token start[b]
// (quantizing them into the cache's format).
struct KvAppendParams {
  TensorRef x;
  KvCacheRef cache;
  const int* block_table;
  const int* start;         // [batch] first cache token written per sequence
  const float* head_scale;  // fp8e4m3:per_head: [heads_kv] scales (x is stored as e4m3(x / scale))
  int batch, heads_kv, n_new;
  int page_size, table_stride;
  // Non-null: token i (of n_new, batch 1) goes to cache row slot_mapping[i] = page * page_size + offset
  // (a contiguous cache: sequence * capacity + token, page_size = capacity); start and block_table are
  // not read, and a slot outside [0, num_slots) is skipped (-1 marks padding tokens).
  const long long* slot_mapping;
  long long num_slots;
  // K smoothing (K cache only, quantized formats): [heads_kv][d] subtracted from every token before it
  // is quantized; null: none.
  const float* k_mean;
};

// Parameters of the cache gather (qattn/decode/kv_gather.cuh): sequence b's first min(kv_lens[b], max_len)
// rows of one cache (K or V) into out, packed [rows, heads_kv, d] of the 16-bit output type from row
// cu_seqlens[b]; cu_seqlens [batch + 1] is written too (null: not). Grid (ceil(max_len / 4), heads_kv, batch).
struct KvGatherParams {
  KvCacheRef cache;
  const int* block_table;
  const int* kv_lens;
  const float* head_scale;  // fp8e4m3:per_head: [heads_kv]
  void* out;
  int* cu_seqlens;
  int batch, heads_kv, max_len;
  int page_size, table_stride;
  const float* k_mean;      // a K-smoothed cache: [heads_kv][d] added back to every row; null: none
};

// Parameters of a KV cache's K smoothing (qattn/decode/kv_smooth.cuh), mean [heads_kv][d] fp32:
//  Mean:   mean[h] = the average of K tokens x[b, h, i] over the first rows of (b, i) in order, skipping
//          tokens whose slot_mapping entry is outside [0, num_slots); grid (heads_kv), rows = n_new.
//  LseFix: lse[b, h, i] += softmax_scale * x[b, h, i] . mean[h / (heads / heads_kv)] for the query rows
//          x [batch, heads_q, q_len, d] and lse [batch, heads_q, q_len]; grid (ceil(rows / 4), heads, batch).
struct KvSmoothParams {
  TensorRef x;
  float* mean;
  const long long* slot_mapping;
  long long num_slots;
  float* lse;
  float softmax_scale;
  int batch, heads, heads_kv, rows;
};

// Parameters of a linear kernel (qattn/linear/): C[M, N] = A[M, K] . W[N, K]^T (+ bias[N]).
//  a: [M, K] fp16/bf16, row stride lda elements;  c: [M, N] of the output type, row stride ldc elements;
//  w: fp16/bf16 [N, K] elements (row stride ldw elements), int8 [N, K] codes (ldw bytes) with
//     W[n][k] = code * w_scale[n], or int4 [N, K/2] bytes (ldw bytes), two codes per byte, the low nibble
//     holding the even k, unsigned codes 0..15 with W[n][k] = (code - w_zero[i]) * w_scale[i] for
//     i = n * (K / kLinearInt4Group) + k / kLinearInt4Group;
//  bias: [N] of the output type, or null.
// Split-K (splits > 1): CTA z of the grid (N tiles, M tiles, splits) sums k in [z * k_split, (z + 1) *
// k_split) into partial[z][M][N] (fp32); the last CTA of an (N, M) tile to finish, counted in
// tile_counters[y * gridDim.x + x] (zero before the launch), adds the splits in order z = 0, 1, ... (the
// same bits for any arrival order), adds the bias, writes C and sets its counter back to zero.
struct LinearParams {
  const void* a;
  const void* w;
  const float* w_scale;
  const float* w_zero;
  const void* bias;
  void* c;
  float* partial;
  int* tile_counters;
  long long lda, ldw, ldc;
  int m, n, k;
  int splits, k_split;
  int pad_;
};

// Input channels sharing one scale and zero point of an int4 weight (w=int4:per_group).
constexpr int kLinearInt4Group = 128;

// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), encoded on the host by the
// driver's cuTensorMapEncodeTiled and read by the TMA unit from the kernel's parameter space.
struct alignas(64) TmaMap {
  unsigned long long opaque[16];
};

// Parameters of a prefill kernel that loads its K / V^T tiles with TMA (tiling token _tma; runtime/
// tma_maps.cpp encodes the maps). The maps come first, for their alignment.
//  k_map: int8 K rows, rank 5: (row bytes, then key bits 0, 2-3, 1 and key / 16), so that a box lands
//         in shared memory in the kernel's permuted key order (prefill_int8/kv_loads.cuh, k_smem_row);
//  v_map: V^T rows, rank 2: (tokens, rows of (b, h_kv, channel)).
struct TmaAttentionParams {
  TmaMap k_map, v_map;
  AttentionParams a;
};

// Quantized V is stored transposed with its token axis padded to this multiple (>= every tile's block_n).
constexpr int kVPadTokens = 128;

// Query rows per Q-smoothing block (AttentionParams::q_mean): fixed, so the quantizer does not depend on
// the attention tiling; every prefill bm is a multiple of it and every warp's rows lie inside one block.
constexpr int kQMeanBlock = 64;

}  // namespace qattn
