/* qattn C API: quantized attention kernels compiled on demand. extern "C", no C++ types.
 *
 * Every call returns a qattn_status; on failure qattn_last_error() gives a one-line message (per thread,
 * valid until the next qattn call on that thread). Status values equal the CLI exit codes.
 * Tensors are device pointers with element strides: element (b, h, s, c) at
 * data + b*sb + h*sh + s*ss + c. Their element type is the spec's out= type (fp16 or bf16).
 * Streams are CUstream values (NULL: the legacy default stream); every launch is asynchronous.
 *
 * Threads: calls on one qattn_runtime may come from several threads at once (the runtime serializes
 * what must be: its kernel table, the cache's connection). qattn_runtime_destroy must not race with any
 * other call on that runtime or on a qattn_prepared made from it, and must come after every such
 * qattn_prepared is destroyed: the caller waits for calls in flight (the Python wrapper's close() does).
 * A qattn_prepared is used by one thread at a time (qattn_run_prepared writes its workspace), and
 * qattn_prepared_destroy must not race with a call on it. qattn_last_error() is per thread. Several
 * processes may share one cache file: a lock held by another process costs one operation at most
 * ~10 s, after which this runtime stops using that file (qattn_cache_status says so). */
#ifndef QATTN_QATTN_H_
#define QATTN_QATTN_H_

#include <stddef.h>
#include <stdint.h>

#include "qattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qattn_status {
  QATTN_OK = 0,
  QATTN_ERROR = 1,       /* compile, launch or cache failure */
  QATTN_BAD_INPUT = 2,   /* the request is malformed or unsupported: the message says what is accepted */
  QATTN_NO_GPU = 3       /* the operation needs a CUDA driver and device and there is none */
} qattn_status;

typedef struct qattn_runtime qattn_runtime;
typedef struct qattn_prepared qattn_prepared;

typedef struct qattn_tensor {
  void* data;
  int64_t sb, sh, ss; /* strides in elements of batch, head and sequence; the head-dim stride is 1 */
} qattn_tensor;

typedef struct qattn_shape {
  int batch, heads_q, heads_kv, q_len, kv_len;
} qattn_shape;

typedef struct qattn_runtime_options {
  const char* cache_path; /* NULL: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db */
  int use_cache;          /* 0: no SQLite at all */
  int read_only;          /* 1: open the cache read-only */
  int tune;               /* 1: tune on a miss; 0: default tiling */
  int device;             /* CUDA device ordinal */
} qattn_runtime_options;

/* Versioned runtime options (qattn_runtime_open). struct_size comes first: the caller sets it to
 * sizeof(qattn_options) of the header it was compiled with (qattn_options_init does, with every default).
 * The library reads the fields that fit in struct_size and takes the defaults for the others, so a
 * program built against an older header works with a newer library; a program built against a newer
 * header works with an older library as long as the fields that library does not know are zero, else
 * QATTN_BAD_INPUT. Later versions only append fields, each on an 8-byte boundary, with zero meaning
 * their default. The same rule holds for every struct below that starts with struct_size. */
typedef struct qattn_options {
  size_t struct_size;
  const char* cache_path;          /* NULL: $QATTN_CACHE_DIR/qattn.db or ~/.cache/qattn/qattn.db */
  int use_cache;                   /* 0: no SQLite at all (default 1) */
  int read_only;                   /* 1: open the user cache read-only (default 0) */
  int tune;                        /* 1: tune on a miss (default); 0: default tiling */
  int device;                      /* CUDA device ordinal (default 0) */
  /* An application-shipped cache opened read-only under the user cache: lookups try the user cache
   * first, then this one; writes go to the user cache only. NULL or "": $QATTN_SHIPPED_CACHE, else none. */
  const char* shipped_cache_path;
} qattn_options;

/* Library version, e.g. "0.1.0". */
QATTN_API const char* qattn_version(void);
QATTN_API const char* qattn_last_error(void);
QATTN_API qattn_runtime_options qattn_default_options(void);

/* Fills *options (struct_size bytes, normally sizeof(qattn_options)) with the defaults and sets
 * struct_size. Accepted struct_size: at least the first version's size. */
QATTN_API qattn_status qattn_options_init(qattn_options* options, size_t struct_size);
/* Creates a runtime from versioned options (NULL: the defaults). */
QATTN_API qattn_status qattn_runtime_open(const qattn_options* options, qattn_runtime** out);
/* The first, unversioned form, kept unchanged for existing callers: the same as qattn_runtime_open with
 * these five fields and shipped_cache_path NULL ($QATTN_SHIPPED_CACHE still applies). New options are
 * only added to qattn_options. */
QATTN_API qattn_status qattn_runtime_create(const qattn_runtime_options* options, qattn_runtime** out);
QATTN_API void qattn_runtime_destroy(qattn_runtime* runtime);

/* The latest cache trouble as one line into text_out (at most text_len bytes with the terminator), ""
 * while the cache works as opened: a layer not opened as asked, or one that failed after opening
 * (locked by another process past its ~10 s budget, damaged, not writable), so that results are not
 * stored. The runtime itself keeps working without that layer. See docs/reliability.md. */
QATTN_API qattn_status qattn_cache_status(qattn_runtime* runtime, char* text_out, size_t text_len);

/* Compile-only (no GPU): renders and compiles `spec` (which must name arch=) with `tiling`
 * ("bm128_bn64_w4_s2", or NULL for the default), storing the cubin in the cache. Writes the kernel name
 * into name_out (if not NULL, at most name_len bytes including the terminator). */
QATTN_API qattn_status qattn_compile(qattn_runtime* runtime, const char* spec, const char* tiling,
                                     char* name_out, size_t name_len);

/* Tunes `spec` for the bucket of `shape` on the runtime's device and stores the winner; writes the
 * winning kernel name and its median time in microseconds. */
QATTN_API qattn_status qattn_tune(qattn_runtime* runtime, const char* spec, qattn_shape shape, char* name_out,
                                  size_t name_len, double* time_us);

/* O = attention(Q, K, V): quantizes internally when the spec is quantized. softmax_scale 0 means
 * 1/sqrt(d). lse: NULL or a float[b][hq][q_len] device buffer (natural-log log-sum-exp). */
QATTN_API qattn_status qattn_attention(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                       qattn_tensor q, qattn_tensor k, qattn_tensor v, qattn_tensor o,
                                       float softmax_scale, float* lse, void* stream);

/* Variable-length batch: shape.batch sequences packed along the token axis, sequence b's queries rows
 * [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q and o and its keys rows [cu_seqlens_kv[b], cu_seqlens_kv[b + 1])
 * of k and v (device int arrays of batch + 1 entries; each tensor's sb is ignored). shape.q_len and
 * shape.kv_len bound the sequences' lengths (a longer one is cut to them). Causal masks align at each
 * sequence's end. lse: NULL or a float[total_q][hq] device buffer. The spec gets `varlen` if it lacks it. */
QATTN_API qattn_status qattn_attention_varlen(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                              qattn_tensor q, qattn_tensor k, qattn_tensor v, qattn_tensor o,
                                              const int* cu_seqlens_q, const int* cu_seqlens_kv,
                                              float softmax_scale, float* lse, void* stream);

/* Two-step form: quantize Q, K and V once into a workspace owned by the handle, then run the attention
 * kernel alone as often as wanted (kernel-only timing, or K/V reused). The inputs may be freed after
 * prepare's work has completed on `stream`. */
QATTN_API qattn_status qattn_prepare(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                     qattn_tensor q, qattn_tensor k, qattn_tensor v, void* stream,
                                     qattn_prepared** out);
QATTN_API qattn_status qattn_run_prepared(qattn_runtime* runtime, qattn_prepared* prepared, qattn_tensor o,
                                          float softmax_scale, float* lse, void* stream);
/* Name of the attention kernel a prepared call runs (valid while the handle lives). */
QATTN_API const char* qattn_prepared_kernel_name(const qattn_prepared* prepared);
QATTN_API void qattn_prepared_destroy(qattn_prepared* prepared);

/* Plan, then run (Runtime::plan_attention, include/qattn/runtime.hpp): the spec, the shape (varlen: the
 * bounds) and the tensors' strides are fixed at plan time, the kernels loaded and the quantization
 * passes and workspace decided; a run takes pointers only and compiles, tunes, allocates, synchronizes
 * and creates nothing, so it may be captured in a CUDA graph, even as the first run. The tensors' data
 * pointers are not read at plan time (may be NULL). Flags: QATTN_PLAN_VARLEN (packed inputs, each run
 * passes offsets as qattn_attention_varlen), QATTN_PLAN_CALLER_WORKSPACE (the plan allocates none; every
 * run passes a 256-byte aligned workspace of qattn_attention_plan_workspace_bytes). A plan's own
 * workspace serves one run at a time: order its runs (one stream). Runs may be issued from several
 * threads (the plan serializes issuing them; outside a capture a run replays the plan's CUDA graph of its
 * launches). Destroy plans before their runtime, and not while a run is being issued. */
typedef struct qattn_attention_plan qattn_attention_plan;
#define QATTN_PLAN_VARLEN 1u
#define QATTN_PLAN_CALLER_WORKSPACE 2u
QATTN_API qattn_status qattn_attention_plan_create(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                                   qattn_tensor q, qattn_tensor k, qattn_tensor v, qattn_tensor o,
                                                   unsigned flags, qattn_attention_plan** out);
QATTN_API qattn_status qattn_attention_plan_workspace_bytes(const qattn_attention_plan* plan, int64_t* bytes_out);
/* Name of the attention kernel the plan runs (valid while the plan lives). */
QATTN_API const char* qattn_attention_plan_kernel_name(const qattn_attention_plan* plan);
/* lse, cu_seqlens_q / cu_seqlens_kv (varlen plans only), softmax_scale (0: 1/sqrt(d)) as in
 * qattn_attention_varlen; workspace NULL: the plan's own. */
QATTN_API qattn_status qattn_attention_plan_run(qattn_runtime* runtime, const qattn_attention_plan* plan,
                                                const void* q, const void* k, const void* v, void* o, float* lse,
                                                const int* cu_seqlens_q, const int* cu_seqlens_kv,
                                                float softmax_scale, void* workspace, void* stream);
QATTN_API void qattn_attention_plan_destroy(qattn_attention_plan* plan);

/* ---- Decode over a KV cache (the C++ side: include/qattn/decode.hpp, flashq.hpp, unified_max.hpp) ----
 * Decode specs: `decode qk=<fmt> pv=<fmt> out=<fp16|bf16> d=<64|128|256> [causal] [gqa=N] [splitk=N]
 * [softmax=exact|sas|unified_max] [paged] [flow=auto|mma|gemv] [arch=...]` with the same K and V format:
 * fp16, bf16, int8:per_token, int4:per_token, int4:per_group, fp8e4m3:per_head, flashq:per_channel.
 * The cache's byte layout is templates/qattn/decode/kv_layout.h. All pointers in these structs are device
 * pointers unless marked "host". */

/* A KV cache (K and V alike; every format but flashq). Strides in bytes, 0: the defaults
 * head_stride = tokens * row bytes (tokens = capacity, or page_size when paged),
 * page_stride = heads_kv * head_stride. Pointers and strides are multiples of 16 bytes. */
typedef struct qattn_kv_cache {
  void* k;
  void* v;
  int64_t page_stride;      /* between sequences (contiguous) or pages (paged) */
  int64_t head_stride;      /* between KV heads */
  int capacity;             /* contiguous: tokens per sequence, a positive multiple of 4 */
  int page_size;            /* paged (spec `paged`): tokens per page, a positive multiple of 4 */
  const int* block_table;   /* paged: int [batch][table_stride] page ids */
  int table_stride;         /* paged: entries per block-table row */
  const float* k_head_scale;   /* fp8e4m3:per_head: fp32 [heads_kv], element = scale * e4m3 */
  const float* v_head_scale;
} qattn_kv_cache;

/* Prefill over a KV cache (chunked prefill, shared prefixes): packed queries q and o [total_q, heads_q, d]
 * with cu_seqlens_q (device int [batch + 1]); sequence b's keys and values are the first kv_lens[b]
 * (device int [batch]) rows of `cache`, described by the decode spec cache_spec (row format, d=, paged;
 * every format but flashq), this chunk's own tokens among the last (appended before the call). shape:
 * batch, heads_q, heads_kv, q_len the longest chunk, kv_len a bound on every kv_lens entry. Causal (in
 * spec) aligns at each sequence's end. lse: NULL or fp32 [total_q][heads_q]. The rows are read back
 * into a per-stream workspace as 16-bit K and V, then spec's variable-length attention runs on them. */
QATTN_API qattn_status qattn_attention_over_cache(qattn_runtime* runtime, const char* spec, qattn_shape shape,
                                                  qattn_tensor q, qattn_tensor o, const int* cu_seqlens_q,
                                                  const char* cache_spec, const qattn_kv_cache* cache,
                                                  const int* kv_lens, float softmax_scale, float* lse, void* stream);

/* The same call as a versioned struct (qattn_cache_prefill_args_init, then qattn_cache_prefill), which
 * also takes a K-smoothed cache's vector. */
typedef struct qattn_cache_prefill_args {
  size_t struct_size;       /* qattn_cache_prefill_args_init */
  const char* spec;         /* host: the prefill spec */
  const char* cache_spec;   /* host: the cache's decode spec */
  qattn_shape shape;
  qattn_tensor q;
  qattn_tensor o;
  const int* cu_seqlens_q;
  qattn_kv_cache cache;
  const int* kv_lens;
  float* lse;
  float softmax_scale;
  int reserved0;
  const float* k_mean;      /* a K-smoothed cache (qattn_append_args.k_mean): its vector; NULL: none */
} qattn_cache_prefill_args;

QATTN_API qattn_status qattn_cache_prefill_args_init(qattn_cache_prefill_args* args, size_t struct_size);
QATTN_API qattn_status qattn_cache_prefill(qattn_runtime* runtime, const qattn_cache_prefill_args* args, void* stream);
/* Plan, then run, for prefill over a cache (an attention plan; qattn_attention_plan_workspace_bytes,
 * _kernel_name and _destroy apply): `args` fixes the specs, shape (the bounds: batch, the longest chunk
 * q_len, the longest cache kv_len), strides and the cache's geometry; its device pointers are not read.
 * A run reads only the device pointers of `args` (q.data, o.data, cu_seqlens_q, the cache's k, v,
 * block_table, head scales, kv_lens, k_mean, lse) and gives qattn_cache_prefill's bits; the workspace
 * (NULL: the plan's own) also holds the rows read back from the cache. Flags: QATTN_PLAN_CALLER_WORKSPACE. */
QATTN_API qattn_status qattn_cache_prefill_plan_create(qattn_runtime* runtime, const qattn_cache_prefill_args* args,
                                                       unsigned flags, qattn_attention_plan** out);
QATTN_API qattn_status qattn_cache_prefill_plan_run(qattn_runtime* runtime, const qattn_attention_plan* plan,
                                                    const qattn_cache_prefill_args* args, void* workspace, void* stream);

/* Bytes of one cache row (one token of one KV head) of a decode spec's format (not flashq). */
QATTN_API qattn_status qattn_kv_row_bytes(const char* spec, int64_t* bytes_out);
/* Bytes of one contiguous K (or V) cache of capacity tokens for batch x heads_kv; a paged cache of
 * `pages` pages takes qattn_kv_cache_bytes(spec, pages, heads_kv, page_size). */
QATTN_API qattn_status qattn_kv_cache_bytes(const char* spec, int batch, int heads_kv, int capacity, int64_t* bytes_out);

/* qattn_append_kv: n_new tokens per sequence (element type out=, [batch, heads_kv, n_new, d] at element
 * strides sb, sh, ss; all 0: contiguous) quantized into both caches from token start[b] (int [batch]).
 * Or by vLLM's slot mapping (start NULL, batch 1): token i ([n_new, heads_kv, d] through sh, ss) goes to
 * cache row slot_mapping[i] = page * page_size + offset (contiguous: sequence * capacity + position);
 * a slot outside [0, num_slots) is skipped (-1: a padding token); num_slots = pages * page_size, or
 * sequences * capacity. */
typedef struct qattn_append_args {
  size_t struct_size;       /* qattn_append_args_init */
  const char* spec;         /* host: a decode spec */
  int batch, heads_kv, n_new, reserved0;
  const void* k;
  const void* v;
  int64_t sb, sh, ss;
  qattn_kv_cache cache;
  const int* start;
  const int64_t* slot_mapping;   /* NULL (default): positions from start; else device int64 [n_new] */
  int64_t num_slots;
  /* K smoothing (quantized K formats, KvCacheView::k_mean in include/qattn/decode.hpp): device fp32
   * [heads_kv, d]; the K cache stores every token minus it, and every call on the cache passes it.
   * init_k_mean 1: this append first sets it to the mean of its K tokens (a cache's first write). */
  float* k_mean;
  int init_k_mean;
  int reserved1;
} qattn_append_args;

/* softmax=unified_max: phi and the window on x - phi, natural-log units of x = softmax_scale * q.k
 * (qattn_calibrate_unified_max gives them); enabled 0: the exact softmax for every row. */
typedef struct qattn_unified_max {
  float phi, lo, hi;        /* defaults 0, -9, 8 */
  int enabled;              /* default 1 */
} qattn_unified_max;

/* FlashQ's cache (INT4/INT2 per-channel blocks of 64 tokens with per-head bit widths, plus an INT8 buffer
 * of the newest tokens). Page strides 0: the sum of the heads' block bytes for their bits. */
typedef struct qattn_flashq_cache {
  void* k_blocks;
  void* v_blocks;
  int64_t k_page_stride, v_page_stride;
  int max_blocks;           /* contiguous: pages per sequence */
  int table_stride;         /* paged: entries per block-table row, one per 64 tokens */
  const int* block_table;   /* paged: int [batch][table_stride] */
  int* heads;               /* int [2][heads_kv][2]; qattn_flashq_prefill writes it */
  int* k_bits;              /* host int [heads_kv], 2 or 4 (prefill: all 0 = chosen and written here) */
  int* v_bits;
  void* k_buffer;           /* INT8 buffers, int8:per_token rows */
  void* v_buffer;
  int64_t buffer_page_stride, buffer_head_stride;   /* 0: the defaults */
  int* compressed_lens;     /* int [batch], tokens in blocks (a multiple of 64) */
  int* buffer_lens;         /* int [batch], tokens in the buffer */
  float* k_scale8;          /* fp32 [heads_kv] universal INT8 scales; qattn_flashq_prefill writes them */
  float* v_scale8;
} qattn_flashq_cache;

/* qattn_decode: shape.q_len new tokens per sequence (1..16) attend to the cache; shape.kv_len is the
 * largest kv_lens entry (it sizes the splits). q, o: element type out=, [batch, heads_q, q_len, d] at the
 * given element strides (sb = sh = ss = 0: contiguous). */
typedef struct qattn_decode_args {
  size_t struct_size;       /* qattn_decode_args_init */
  const char* spec;         /* host */
  qattn_shape shape;
  int splits;               /* 0: splitk= of the spec, else the tuned table, else the runtime's choice */
  qattn_tensor q;
  qattn_tensor o;
  qattn_kv_cache cache;     /* every format but flashq */
  const int* kv_lens;       /* int [batch], each in [q_len, the cache's tokens per sequence] */
  const qattn_flashq_cache* flashq;   /* host pointer to the flashq cache (flashq specs only; kv_lens unused) */
  float softmax_scale;      /* 0: 1/sqrt(d) */
  qattn_unified_max unified_max;
  float* lse;               /* NULL or fp32 [batch, heads_q, q_len], natural log */
  int* row_flags;           /* NULL or int [batch * heads_q * q_len]: unified_max's per-row flags */
  const char* tiling;       /* host; NULL: the runtime's choice, else e.g. "bm16_bn64_w4_s2" */
  const float* k_mean;      /* a K-smoothed cache (qattn_append_args.k_mean): its vector; NULL: none */
} qattn_decode_args;

QATTN_API qattn_status qattn_append_args_init(qattn_append_args* args, size_t struct_size);
QATTN_API qattn_status qattn_decode_args_init(qattn_decode_args* args, size_t struct_size);

QATTN_API qattn_status qattn_append_kv(qattn_runtime* runtime, const qattn_append_args* args, void* stream);
/* Plan, then run, for qattn_append_kv (Runtime::plan_append): `args` fixes the spec, batch, heads_kv,
 * n_new, strides, the cache's geometry, the write mode (slot mapping when args.slot_mapping is non-NULL,
 * else start), num_slots and K smoothing (k_mean non-NULL, init_k_mean); its device pointers are not
 * read. A run reads only the device pointers of `args` (k, v, the cache's k, v, block_table, head
 * scales, k_mean, start or slot_mapping) and writes qattn_append_kv's bytes; it may be captured in a
 * CUDA graph even as the first call. Destroy plans before their runtime. */
typedef struct qattn_append_plan qattn_append_plan;
QATTN_API qattn_status qattn_append_plan_create(qattn_runtime* runtime, const qattn_append_args* args,
                                                qattn_append_plan** out);
QATTN_API qattn_status qattn_append_plan_run(qattn_runtime* runtime, const qattn_append_plan* plan,
                                             const qattn_append_args* args, void* stream);
QATTN_API const char* qattn_append_plan_kernel_name(const qattn_append_plan* plan);
QATTN_API void qattn_append_plan_destroy(qattn_append_plan* plan);
/* The split-K decode kernel (and the combine kernel with more than one split) on `stream`. */
QATTN_API qattn_status qattn_decode(qattn_runtime* runtime, const qattn_decode_args* args, void* stream);
/* What qattn_decode runs for `args` (loads the kernel, launches nothing): kernel name, dataflow
 * ("mma" or "gemv") and split count; any output may be NULL. */
QATTN_API qattn_status qattn_decode_route(qattn_runtime* runtime, const qattn_decode_args* args, char* name_out,
                                          size_t name_len, char* flow_out, size_t flow_len, int* splits_out);
/* Plan, then run, for decode (Runtime::plan_decode, include/qattn/decode.hpp): `args` as for qattn_decode,
 * its device pointers not read; the spec, shape, strides, cache geometry, tiling, split count and
 * unified-max window are fixed. shape.kv_len fixes the split count: plan for the longest cache a run may
 * hold and let kv_lens vary below it (runs then give qattn_decode's bits for that shape); plan again when
 * it grows. A run reads only the device pointers of `args` (q.data, o.data, the cache's k, v,
 * block_table and head scales, kv_lens, the flashq cache's device pointers, lse, row_flags) and
 * softmax_scale; it compiles, tunes, allocates, synchronizes and creates nothing, so it may be captured
 * in a CUDA graph, even as the first run. Flag: QATTN_PLAN_CALLER_WORKSPACE (every run passes a 256-byte
 * aligned workspace of qattn_decode_plan_workspace_bytes). Threads and destruction as attention plans.
 * qattn_decode_fallback_rows does not see plan runs: pass row_flags to read unified_max's flags. */
typedef struct qattn_decode_plan qattn_decode_plan;
QATTN_API qattn_status qattn_decode_plan_create(qattn_runtime* runtime, const qattn_decode_args* args, unsigned flags,
                                                qattn_decode_plan** out);
QATTN_API qattn_status qattn_decode_plan_workspace_bytes(const qattn_decode_plan* plan, int64_t* bytes_out);
/* The split-K kernel's name (valid while the plan lives) and the partial slots per row. */
QATTN_API const char* qattn_decode_plan_kernel_name(const qattn_decode_plan* plan);
QATTN_API int qattn_decode_plan_splits(const qattn_decode_plan* plan);
/* workspace NULL: the plan's own. */
QATTN_API qattn_status qattn_decode_plan_run(qattn_runtime* runtime, const qattn_decode_plan* plan,
                                             const qattn_decode_args* args, void* workspace, void* stream);
QATTN_API void qattn_decode_plan_destroy(qattn_decode_plan* plan);
/* Rows the last softmax=unified_max decode on `stream` recomputed exactly (waits for the stream). */
QATTN_API qattn_status qattn_decode_fallback_rows(qattn_runtime* runtime, void* stream, int64_t* rows_out);

/* ---- FlashQ (include/qattn/flashq.hpp) ---- */
/* Bytes of one page of blocks (one 64-token block of every head) for the heads' bit widths (host int
 * [heads_kv], 2 or 4; NULL: 4 bits everywhere, an upper bound for any choice). */
QATTN_API qattn_status qattn_flashq_page_bytes(int d, int heads_kv, const int* bits, int64_t* bytes_out);
/* Bytes of one INT8 buffer (K or V) for batch x heads_kv with the default strides. */
QATTN_API qattn_status qattn_flashq_buffer_bytes(int d, int batch, int heads_kv, int64_t* bytes_out);

/* Fills an empty cache with the prefill tokens: sequence b's lens[b] tokens (host int [batch]; NULL: n
 * for all) of k, v ([batch, heads_kv, n, d], element type out=, element strides; 0,0,0: contiguous).
 * Bit widths whose host array in the cache is all 0 are chosen (n_low heads at 2 bits, -1: heads_kv / 2)
 * and written back there; the page strides used are written back too. k_scale8 / v_scale8: host fp32
 * [heads_kv] universal scales, NULL: absmax / 127. With bits or scales to choose it waits for `stream`. */
typedef struct qattn_flashq_prefill_args {
  size_t struct_size;       /* qattn_flashq_prefill_args_init */
  const char* spec;         /* host: a flashq:per_channel decode spec */
  int batch, heads_kv, n, n_low;
  const void* k;
  const void* v;
  int64_t sb, sh, ss;
  const int* lens;
  qattn_flashq_cache* cache;   /* host pointer */
  const float* k_scale8;
  const float* v_scale8;
} qattn_flashq_prefill_args;

/* One decode step's flush + append of n_new (1..16) tokens per sequence, on the device (no host sync). */
typedef struct qattn_flashq_append_args {
  size_t struct_size;       /* qattn_flashq_append_args_init */
  const char* spec;
  int batch, heads_kv, n_new, reserved0;
  const void* k;
  const void* v;
  int64_t sb, sh, ss;
  const qattn_flashq_cache* cache;   /* host pointer; bits set */
} qattn_flashq_append_args;

QATTN_API qattn_status qattn_flashq_prefill_args_init(qattn_flashq_prefill_args* args, size_t struct_size);
QATTN_API qattn_status qattn_flashq_append_args_init(qattn_flashq_append_args* args, size_t struct_size);
QATTN_API qattn_status qattn_flashq_prefill(qattn_runtime* runtime, const qattn_flashq_prefill_args* args, void* stream);
QATTN_API qattn_status qattn_flashq_append(qattn_runtime* runtime, const qattn_flashq_append_args* args, void* stream);

/* ---- Linear layers (the C++ side: include/qattn/linear.hpp) ----
 * qattn_linear: C[m, n] = A[m, k] . W[n, k]^T (+ bias[n]) for a spec `linear a=<fp16|bf16> w=<fmt>
 * out=<fp16|bf16> n=<N> k=<K> [bias] [flow=auto|gemv|flat|gemm]`, w one of fp16, bf16, int8:per_channel,
 * int4:per_group (byte layouts: qattn::LinearParams in templates/qattn/abi.h). Device pointers 16-byte
 * aligned; strides in elements (ldw: bytes for int8 and int4), 0: packed rows. */
typedef struct qattn_linear_args {
  size_t struct_size;       /* qattn_linear_args_init */
  const char* spec;         /* host: a linear spec */
  int m;                    /* tokens, >= 1 */
  int splits;               /* split-K count; 0: chosen */
  const void* a;            /* [m, k] of a='s type */
  int64_t lda;
  const void* w;            /* the weights in w='s format */
  int64_t ldw;
  const float* w_scale;     /* int8: [n]; int4: [n, k / 128] */
  const float* w_zero;      /* int4: [n, k / 128] zero points in code units */
  const void* bias;         /* spec `bias`: [n] of out's type */
  void* c;                  /* [m, n] of out's type */
  int64_t ldc;
  const char* tiling;       /* host; NULL: chosen, else e.g. "bm8_bn128_w4_s4" */
} qattn_linear_args;

QATTN_API qattn_status qattn_linear_args_init(qattn_linear_args* args, size_t struct_size);
/* One kernel on `stream`: the dataflow for m (flow=auto), its tiling and split-K. */
QATTN_API qattn_status qattn_linear(qattn_runtime* runtime, const qattn_linear_args* args, void* stream);
/* What qattn_linear runs for `args` (loads and launches nothing; device pointers may be stand-ins of the
 * right alignment): kernel name, dataflow ("gemv", "flat" or "gemm") and split count; any output may be NULL. */
QATTN_API qattn_status qattn_linear_route(qattn_runtime* runtime, const qattn_linear_args* args, char* name_out,
                                          size_t name_len, char* flow_out, size_t flow_len, int* splits_out);
/* Plan, then run, for qattn_linear (Runtime::plan_linear, include/qattn/linear.hpp): `args` fixes the spec,
 * m, strides, tiling and split count (its device pointers are not read); the kernel is loaded. A run
 * reads only args' device pointers (a, w, w_scale, w_zero, bias, c) and m (0: the plan's, else at most
 * the plan's); it compiles, allocates and synchronizes nothing, so it may be captured in a CUDA graph,
 * even as the first run. Flag QATTN_PLAN_CALLER_WORKSPACE: every run with split-K passes a 256-byte
 * aligned workspace of qattn_linear_plan_workspace_bytes, zeroed before its first use (runs leave it
 * zeroed). Destroy plans before their runtime. */
typedef struct qattn_linear_plan qattn_linear_plan;
QATTN_API qattn_status qattn_linear_plan_create(qattn_runtime* runtime, const qattn_linear_args* args, unsigned flags,
                                                qattn_linear_plan** out);
QATTN_API qattn_status qattn_linear_plan_workspace_bytes(const qattn_linear_plan* plan, int64_t* bytes_out);
QATTN_API const char* qattn_linear_plan_kernel_name(const qattn_linear_plan* plan);
QATTN_API qattn_status qattn_linear_plan_run(qattn_runtime* runtime, const qattn_linear_plan* plan,
                                             const qattn_linear_args* args, void* workspace, void* stream);
QATTN_API void qattn_linear_plan_destroy(qattn_linear_plan* plan);
/* Times the layer's three dataflows over m (host int rows[rows_count]; NULL or 0: 1 .. 8192, the default
 * list of include/qattn/linear_inflection.hpp) on this GPU, stores M1 / M2 in the cache and uses them at once;
 * writes the table (JSON, kind linear_dataflow) into json_out when not NULL and the bytes it needs with
 * the terminator into json_size_out when not NULL. *tuned_out = 1 when a table of the spec's layer is stored. */
QATTN_API qattn_status qattn_tune_linear(qattn_runtime* runtime, const char* spec, const int* rows, int rows_count,
                                         char* json_out, size_t json_len, size_t* json_size_out);
QATTN_API qattn_status qattn_linear_tuned(qattn_runtime* runtime, const char* spec, int* tuned_out);

/* ---- Decode tuning and unified-max calibration ---- */
/* qattn_tune_decode's sweeps (host arrays; NULL or count 0: the default list). */
typedef struct qattn_tune_decode_options {
  size_t struct_size;         /* qattn_tune_decode_options_init */
  const int* kv_lens;         /* KV length buckets, powers of two (default 1024 ... 262144) */
  const int* rows;            /* dataflow sweep: M = gqa x q_len values */
  const int64_t* batch_heads; /* split sweep: batch x heads_kv buckets */
  const int* splits;          /* split sweep: counts tried */
  int kv_lens_count, rows_count, batch_heads_count, splits_count;
  int heads_kv;               /* default 8 */
  int batch;                  /* dataflow sweep's batch (default 1) */
  int min_split_tokens;       /* default 256 */
  int q_len;                  /* split sweep's new tokens per sequence (default 1) */
  double tolerance;           /* default 0.03 */
} qattn_tune_decode_options;

QATTN_API qattn_status qattn_tune_decode_options_init(qattn_tune_decode_options* options, size_t struct_size);
/* Times decode's GEMV and tensor-core dataflows and its split counts for the spec's family on this GPU,
 * stores both decisions in the cache and uses them at once (minutes with the defaults). options NULL:
 * the defaults. Writes {"dataflow":<table>,"splits":<table>} (JSON) into json_out when not NULL, and
 * the bytes it needs with the terminator into json_size_out when not NULL. */
QATTN_API qattn_status qattn_tune_decode(qattn_runtime* runtime, const char* spec, const qattn_tune_decode_options* options,
                                         char* json_out, size_t json_len, size_t* json_size_out);
/* *tuned_out = 1 when both decisions of the spec's family are stored for this device and toolchain. */
QATTN_API qattn_status qattn_decode_tuned(qattn_runtime* runtime, const char* spec, int* tuned_out);

typedef enum qattn_score_sample {
  QATTN_SAMPLE_ROW_MAXIMA = 0,  /* the largest unmasked x of each row */
  QATTN_SAMPLE_ROW_LSE = 1,     /* each row's natural-log log-sum-exp (keys_per_row or row_keys needed) */
  QATTN_SAMPLE_SCORES = 2       /* every pre-exp score */
} qattn_score_sample;

typedef struct qattn_unified_max_options {
  size_t struct_size;         /* qattn_unified_max_options_init */
  int sample;                 /* a qattn_score_sample (default row maxima) */
  int reserved0;
  double coverage;            /* central share of the samples (default 0.9999) */
  double window_lo, window_hi;   /* the window on x - phi (default -9, 8: fp16 P) */
  double min_headroom;        /* default 0.5 */
  double keys_per_row;        /* row lse: the longest row's key count (default 1) ... */
  const int* row_keys;        /* ... or host int [count], each sample's own */
} qattn_unified_max_options;

typedef struct qattn_unified_max_calibration {
  size_t struct_size;         /* set by the caller (sizeof); the library writes what fits */
  int enabled;
  int reserved0;
  qattn_unified_max params;   /* ready for qattn_decode_args.unified_max */
  double interval_lo, interval_hi;   /* the calibrated coverage interval of the samples */
  double max_lo, max_hi;      /* the row maxima it implies */
  double headroom;            /* distance of [max_lo, max_hi] from each window edge (may be < 0) */
  int64_t samples;            /* finite samples used */
  char reason[256];           /* why it is disabled; "" when enabled */
} qattn_unified_max_calibration;

QATTN_API qattn_status qattn_unified_max_options_init(qattn_unified_max_options* options, size_t struct_size);
/* The default and the widest accepted window on x - phi for a decode spec's P type (fp16 or bf16). */
QATTN_API qattn_status qattn_unified_max_window(const char* spec, double* lo_out, double* hi_out, double* limit_lo_out,
                                                double* limit_hi_out);
/* phi from host samples (-inf skipped; NaN or +inf: bad input); options NULL: the defaults. Disabled,
 * with the reason, when the implied row maxima do not fit the window with min_headroom on each side. */
QATTN_API qattn_status qattn_calibrate_unified_max(const double* values, size_t count, const qattn_unified_max_options* options,
                                                   qattn_unified_max_calibration* out);
QATTN_API qattn_status qattn_calibrate_unified_max_f32(const float* values, size_t count,
                                                       const qattn_unified_max_options* options,
                                                       qattn_unified_max_calibration* out);

/* Format calibration (include/qattn/calibrate.hpp): measures quantized candidates of an fp16/bf16
 * reference spec on one layer's sample Q, K, V (device tensors as for qattn_attention, element type
 * out=) and keeps the cheapest that meets the thresholds; the decision is stored in the runtime's cache
 * under layer_key and reused while the reference, thresholds and candidates are the same. */
typedef struct qattn_format_calibration_options {
  size_t struct_size;         /* qattn_format_calibration_options_init */
  double min_cosine;          /* default 0.999 */
  double max_rel_l1;          /* default 0.05 */
  const char* const* candidates;   /* host specs; NULL with count 0: the default candidates */
  int candidates_count;
  int force;                  /* 1: measure again even when a usable decision is stored */
  const char* inputs;         /* what the sample data is, kept in the decision (NULL: "") */
} qattn_format_calibration_options;

QATTN_API qattn_status qattn_format_calibration_options_init(qattn_format_calibration_options* options,
                                                             size_t struct_size);
/* Writes the chosen spec (the reference when none passed) into chosen_out and the decision as JSON
 * (format "qattn.quant_format") into json_out; *_size_out get the bytes needed with the terminator.
 * Any output may be NULL; options NULL: the defaults. */
QATTN_API qattn_status qattn_calibrate_format(qattn_runtime* runtime, const char* layer_key, const char* reference_spec,
                                              qattn_shape shape, qattn_tensor q, qattn_tensor k, qattn_tensor v,
                                              const qattn_format_calibration_options* options, char* chosen_out,
                                              size_t chosen_len, char* json_out, size_t json_len,
                                              size_t* json_size_out);

#ifdef __cplusplus
}
#endif

#endif /* QATTN_QATTN_H_ */
