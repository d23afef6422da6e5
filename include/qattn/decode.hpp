// Decode attention over a KV cache: the few newest tokens of each sequence attend to its whole cache,
// which is split across CTAs (split-K) and merged by a combine kernel. The cache's byte layout (rows of
// an optional quantization header + codes, one row per token and KV head, heads' rows contiguous,
// contiguous or paged; FlashQ's blocks and INT8 buffer) is written down in
// templates/qattn/decode/kv_layout.h.
//
// Spec: `decode qk=<kv fmt> pv=<kv fmt> out=<fp16|bf16> d=<64|128|256> [causal] [gqa=N] [splitk=N]
//        [softmax=exact|sas|unified_max] [paged] [flow=auto|mma|gemv]`
// with the same format for K and V: fp16, bf16 (out equal to it), int8:per_token, int4:per_token,
// int4:per_group, fp8e4m3:per_head or flashq:per_channel (include/qattn/flashq.hpp). Queries and
// outputs have element type `out`.
#pragma once
#include <cstddef>
#include <string>

#include "qattn/abi.h"
#include "qattn/export.h"
#include "qattn/flashq.hpp"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "qattn/unified_max.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

// A KV cache on the device (both the K and the V cache have this layout; see kv_layout.h).
struct KvCacheView {
  void* k = nullptr;
  void* v = nullptr;
  // Bytes between sequences (contiguous) or pages (paged), and between KV heads. 0: the defaults,
  // head_stride = tokens * row_bytes (tokens = capacity or page_size), page_stride = heads_kv * head_stride.
  long long page_stride = 0, head_stride = 0;
  int capacity = 0;                  // contiguous: tokens each sequence's rows can hold
  int page_size = 0;                 // paged (spec `paged`): tokens per page, a multiple of 4
  const int* block_table = nullptr;  // paged: device int [batch][table_stride], page ids
  int table_stride = 0;              // paged: entries per block-table row (pages per sequence at most)
  // fp8e4m3:per_head: device fp32 [heads_kv] scales of the K and the V cache (element = scale * e4m3).
  const float* k_head_scale = nullptr;
  const float* v_head_scale = nullptr;
  // K smoothing (quantized K formats: int8, int4, fp8e4m3; not flashq): device fp32 [heads_kv, d], one
  // vector per KV head that the K cache's rows have been taken from: the cache stores k - k_mean[h].
  // Every call that writes or reads the cache passes the same vector. Softmax does not see it (each
  // score of a query moves by the same q.k_mean), so decode and prefill over the cache give the same
  // output as without it, with K's channel bias out of the quantized rows; the LSE they return is that
  // of the true keys. Set it once per cache, e.g. from its first append (AppendKvCall::init_k_mean), and
  // keep it while the cache holds rows written with it. Null: rows hold k itself. With fp8e4m3:per_head,
  // choose k_head_scale from k - k_mean.
  float* k_mean = nullptr;
};

// How the runtime splits a decode call's cache (split_tokens is a multiple of block_n; no split is
// empty at kv_len). requested > 0 is taken as is (clamped to the chunks); otherwise the fewest splits
// that keep `capacity` resident CTAs (the whole GPU) >= 95% busy over every wave of
// units x splits CTAs (units = batch x KV heads x row blocks), with >= 4 chunks per warp.
struct DecodeSplits {
  int splits = 1, split_tokens = 0;
};
DecodeSplits plan_decode_splits(int requested, int kv_len, int block_n, int warps, long long units, int capacity);

// Bytes of one cache row (token, KV head) of the spec's K format.
int kv_row_bytes(const Spec& spec);
// Bytes of one contiguous cache (K or V) holding `capacity` tokens for each of batch x heads_kv.
long long kv_cache_bytes(const Spec& spec, int batch, int heads_kv, int capacity);

// problem: batch, heads_q, heads_kv, q_len (new tokens per sequence, 1..16) and kv_len (the largest
// entry of kv_lens: it sizes the splits; a smaller true maximum only leaves splits empty).
struct DecodeCall {
  Spec spec;
  Problem problem;
  void* q = nullptr;              // [batch, heads_q, q_len, d], strides below (elements)
  long long q_sb = 0, q_sh = 0, q_ss = 0;   // 0,0,0: contiguous [b, hq, q_len, d]
  void* o = nullptr;              // same shape and element type (spec.out)
  long long o_sb = 0, o_sh = 0, o_ss = 0;
  KvCacheView cache;              // every format but flashq
  const int* kv_lens = nullptr;   // device int [batch], each in [q_len, capacity or table_stride*page_size]
  // flashq: the cache instead of `cache` and `kv_lens` (its lengths are compressed_lens + buffer_lens;
  // problem.kv_len bounds their sum). The blocks are computed with the flow's kernel, the INT8 buffer
  // (which holds the new tokens, and the causal mask) with the int8:per_token one, into one combine.
  FlashQCacheView flashq;
  float softmax_scale = 0;        // 0: 1/sqrt(d)
  float* lse = nullptr;           // optional device fp32 [batch, heads_q, q_len], natural log
  int splits = 0;                 // 0: spec.split_k when set, else the runtime's choice
  Tiling tiling = Tiling{0, 0, 0, 0};   // block_m 0: the runtime's choice (decode_shape.h, for flow=gemv
                                        // decode_gemv_shape.h, list the valid ones)
  // softmax=unified_max (FlashDecoding++; include/qattn/unified_max.hpp): phi and the window, natural-log
  // units of x = softmax_scale * q.k (calibrate_unified_max gives them). decode() runs the unified-max
  // kernel, then the exact kernel of the same tiling on the rows it flagged, then the combine; with
  // unified_max.enabled = false, the exact kernel alone.
  UnifiedMax unified_max;
  // Optional device int [batch * heads_q * q_len]: each row's flags (kUmOverflow | kUmSeen; != kUmSeen:
  // recomputed exactly, 0 for every row when unified_max is disabled). Null: a per-stream workspace
  // (Runtime::decode_fallback_rows reads either).
  int* row_flags = nullptr;
};

// Plan, then run (Runtime::plan_decode): a decode call decided once (spec, shape, q/o strides, cache
// geometry, tiling, split count, unified-max window) and run many times on pointers only. A run
// compiles, tunes, allocates, synchronizes and creates nothing, so it may be captured in a CUDA graph at
// any time, including the first; outside a capture it replays the plan's own CUDA graph of its launches.
// Lengths: the split count is fixed from problem.kv_len, so make the plan for the longest cache a run may
// hold (its capacity) and let kv_lens (or a flashq cache's lengths) vary below it; runs then give the bits
// of decode() with the same problem. Make a new plan when that bound grows.
class DecodePlan {
 public:
  virtual ~DecodePlan() = default;
  virtual const std::string& kernel_name() const = 0;   // the split-K kernel over the cache (flashq: its blocks)
  virtual const Problem& problem() const = 0;
  virtual int splits() const = 0;                       // partial slots per row (flashq: blocks' + the buffer's)
  // Split partials and unified_max's row flags: the plan's own unless a run passes a workspace of this
  // size (256-byte aligned); 0 for one split without unified_max.
  virtual size_t workspace_bytes() const = 0;
};

// One run of a decode plan: the device pointers of DecodeCall (the rest is the plan's).
struct DecodeRun {
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;                  // optional
  // Row formats (every format but flashq): KvCacheView's pointers and the lengths.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int* block_table = nullptr;      // paged caches (flashq's too)
  const float* k_head_scale = nullptr;   // fp8e4m3:per_head
  const float* v_head_scale = nullptr;
  const float* k_mean = nullptr;         // KvCacheView::k_mean; a plan made with it needs it on every run
  const int* kv_lens = nullptr;
  // flashq: FlashQCacheView's device pointers.
  void* k_blocks = nullptr;
  void* v_blocks = nullptr;
  void* k_buffer = nullptr;
  void* v_buffer = nullptr;
  const int* flashq_heads = nullptr;
  const int* compressed_lens = nullptr;
  const int* buffer_lens = nullptr;
  int* row_flags = nullptr;              // unified_max: null = in the workspace
  float softmax_scale = 0;               // 0: 1/sqrt(d)
  void* workspace = nullptr;             // null: the plan's own
};

// Appends n_new tokens per sequence (fp16/bf16 of type spec.out, [batch, heads_kv, n_new, d] with the
// strides below; 0,0,0 = contiguous) into both caches at token start[b], quantizing into the format.
struct AppendKvCall {
  Spec spec;
  int batch = 1, heads_kv = 1, n_new = 1;
  const void* k = nullptr;
  const void* v = nullptr;
  long long sb = 0, sh = 0, ss = 0;
  KvCacheView cache;
  const int* start = nullptr;     // device int [batch]: token i of sequence b goes to position start[b] + i
  // Instead of start, vLLM's slot mapping: device int64 [n_new], token i to cache row slot_mapping[i] =
  // page * page_size + offset (a contiguous cache: sequence * capacity + position). The tokens are one
  // batch (batch 1; k / v [n_new, heads_kv, d] through sh and ss). A slot outside [0, num_slots) is
  // skipped (-1 marks a padding token); num_slots is the cache's rows per head (pages * page_size, or
  // sequences * capacity).
  const long long* slot_mapping = nullptr;
  long long num_slots = 0;
  // K smoothing: first set cache.k_mean (non-null) to the mean of this append's K tokens per KV head
  // (over its first 4096 tokens in (sequence, token) order, skipped slots left out), then store every
  // token minus it. For a cache's first write; later appends pass the same cache.k_mean with this false.
  bool init_k_mean = false;
};

// Plan, then run, for append_kv (Runtime::plan_append): the spec, batch, heads, token count, strides,
// cache geometry and write mode (start or slot mapping, num_slots, K smoothing and init_k_mean) decided
// once; a run takes pointers only, compiles, allocates, synchronizes and creates nothing, so it may be
// captured in a CUDA graph even as the first call, and outside a capture replays the plan's own graph.
class AppendPlan {
 public:
  virtual ~AppendPlan() = default;
  virtual const std::string& kernel_name() const = 0;
};

// One run of an append plan: the device pointers of AppendKvCall (give start or slot_mapping as the
// plan was made; k_mean exactly when the plan's cache had one).
struct AppendRun {
  const void* k = nullptr;
  const void* v = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int* block_table = nullptr;
  const float* k_head_scale = nullptr;
  const float* v_head_scale = nullptr;
  float* k_mean = nullptr;
  const int* start = nullptr;
  const long long* slot_mapping = nullptr;
};

}  // namespace qattn
QATTN_PUBLIC_END
