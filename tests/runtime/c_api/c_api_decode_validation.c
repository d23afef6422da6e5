/* CPU checks: decode, append, FlashQ and tuning calls reject malformed requests with QATTN_BAD_INPUT and
 * a one-line message saying what is accepted, before any GPU work (the specs name their arch, so no
 * device is asked for it). Also compile-only of a decode kernel, and the unified-max calibration. */
#include <math.h>
#include <string.h>

#include "c_api_check.h"

#define INT8_SPEC "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 arch=sm_90a"
#define FLASHQ_SPEC "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 arch=sm_90a"

/* Aligned, never dereferenced: the checks fail before any launch. */
#define FAKE(addr) ((void*)(uintptr_t)(addr))

static qattn_decode_args decode_args(void) {
  qattn_decode_args a;
  qattn_decode_args_init(&a, sizeof a);
  a.spec = INT8_SPEC;
  a.shape.batch = 2, a.shape.heads_q = 8, a.shape.heads_kv = 2, a.shape.q_len = 1, a.shape.kv_len = 100;
  a.q.data = FAKE(0x10000);
  a.o.data = FAKE(0x20000);
  a.cache.k = FAKE(0x30000);
  a.cache.v = FAKE(0x40000);
  a.cache.capacity = 128;
  a.kv_lens = (const int*)FAKE(0x50000);
  return a;
}

static void check_decode_args(qattn_runtime* rt) {
  qattn_decode_args a = decode_args();
  CHECK_STATUS(qattn_decode(NULL, &a, NULL), QATTN_BAD_INPUT, "runtime is NULL");
  CHECK_STATUS(qattn_decode(rt, NULL, NULL), QATTN_BAD_INPUT, "args is NULL");
  a.struct_size = 16;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "struct_size 16 is below");
  a = decode_args();
  a.spec = NULL;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "args.spec is NULL");
  a.spec = "prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a";
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "takes a decode spec");
  a.spec = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=96 gqa=4 arch=sm_90a";
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "128");
  a = decode_args();
  a.tiling = "bm7";
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, NULL);
  a = decode_args();
  a.cache.capacity = 6;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "multiple of 4");
  a = decode_args();
  a.cache.k = NULL;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "cache.k");
  a = decode_args();
  a.spec = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 paged arch=sm_90a";
  a.cache.page_size = 16;   /* block_table missing */
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "block_table");
  a = decode_args();
  a.spec = "decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=fp16 d=128 gqa=4 arch=sm_90a";
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "k_head_scale");
  a = decode_args();
  a.spec = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 softmax=unified_max arch=sm_90a";
  a.unified_max.lo = 1, a.unified_max.hi = -1;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, NULL);

  /* FlashQ: the host parts this layer reads are checked first. */
  a = decode_args();
  a.spec = FLASHQ_SPEC;
  a.shape.heads_q = 2;
  CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "needs args.flashq");
  {
    qattn_flashq_cache fq;
    memset(&fq, 0, sizeof fq);
    a.flashq = &fq;
    CHECK_STATUS(qattn_decode(rt, &a, NULL), QATTN_BAD_INPUT, "args.flashq.k_bits is NULL");
  }
  CHECK_STATUS(qattn_decode_fallback_rows(rt, NULL, NULL), QATTN_BAD_INPUT, "rows_out is NULL");
}

/* Decode plans: the handle arguments, then the call's own checks, which the plan makes before any GPU
 * work; its device pointers are not read (a plan of NULL pointers is refused only for its spec). */
static void check_decode_plan_args(qattn_runtime* rt) {
  qattn_decode_args a = decode_args();
  qattn_decode_plan* plan = (qattn_decode_plan*)FAKE(0x60000);
  CHECK_STATUS(qattn_decode_plan_create(NULL, &a, 0, &plan), QATTN_BAD_INPUT, "runtime is NULL");
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, 0, NULL), QATTN_BAD_INPUT, "out is NULL");
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, QATTN_PLAN_VARLEN, &plan), QATTN_BAD_INPUT,
               "unknown flags 1; accepted: QATTN_PLAN_CALLER_WORKSPACE (2)");
  CHECK(plan == NULL);
  a.spec = "prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a";
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, 0, &plan), QATTN_BAD_INPUT, "takes a decode spec");
  a = decode_args();
  a.q.data = NULL, a.o.data = NULL, a.cache.k = a.cache.v = NULL, a.kv_lens = NULL;
  a.cache.capacity = 6;
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, 0, &plan), QATTN_BAD_INPUT, "multiple of 4");
  a = decode_args();
  a.splits = -1;
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, 0, &plan), QATTN_BAD_INPUT, "plan_decode: splits must be >= 0");
  a = decode_args();
  a.spec = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 softmax=unified_max arch=sm_90a";
  a.unified_max.lo = 1, a.unified_max.hi = -1;
  CHECK_STATUS(qattn_decode_plan_create(rt, &a, 0, &plan), QATTN_BAD_INPUT, NULL);
  CHECK(plan == NULL);
  a = decode_args();
  CHECK_STATUS(qattn_decode_plan_run(NULL, NULL, &a, NULL, NULL), QATTN_BAD_INPUT, "runtime is NULL");
  CHECK_STATUS(qattn_decode_plan_run(rt, NULL, &a, NULL, NULL), QATTN_BAD_INPUT, "plan is NULL");
  {
    int64_t bytes = 0;
    CHECK_STATUS(qattn_decode_plan_workspace_bytes(NULL, &bytes), QATTN_BAD_INPUT, "plan is NULL");
  }
  CHECK(strcmp(qattn_decode_plan_kernel_name(NULL), "") == 0);
  CHECK(qattn_decode_plan_splits(NULL) == 0);
  qattn_decode_plan_destroy(NULL);
}

/* Prefill over a cache: the call's own arguments, then the cache against the prefill spec. */
static void check_attention_over_cache_args(qattn_runtime* rt) {
  const char* prefill = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 arch=sm_90a";
  qattn_shape shape = {2, 8, 2, 16, 64};
  qattn_tensor t = {FAKE(0x10000), 0, 128, 8 * 128};
  const int* cu = (const int*)FAKE(0x20000);
  const int* lens = (const int*)FAKE(0x30000);
  qattn_kv_cache cache;
  memset(&cache, 0, sizeof cache);
  cache.k = FAKE(0x40000), cache.v = FAKE(0x50000);
  cache.capacity = 64;
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, NULL, INT8_SPEC, &cache, lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "cu_seqlens_q is NULL");
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu, INT8_SPEC, NULL, lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "cache is NULL");
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu, INT8_SPEC, &cache, NULL, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "kv_lens is NULL");
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu, prefill, &cache, lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "decode spec");
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu,
                                          "decode qk=int8:per_token pv=int8:per_token out=fp16 d=64 arch=sm_90a", &cache,
                                          lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "same d= and out=");
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu,
                                          "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 arch=sm_90a",
                                          &cache, lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "flashq");
  cache.capacity = 6;
  CHECK_STATUS(qattn_attention_over_cache(rt, prefill, shape, t, t, cu, INT8_SPEC, &cache, lens, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "multiple of 4");
  cache.capacity = 64;

  /* The versioned form, and its plans: the same checks, K smoothing's, and the plan's own arguments. */
  qattn_cache_prefill_args a;
  CHECK_STATUS(qattn_cache_prefill_args_init(&a, sizeof a), QATTN_OK, NULL);
  a.spec = prefill, a.cache_spec = INT8_SPEC, a.shape = shape, a.q = t, a.o = t, a.cu_seqlens_q = cu, a.cache = cache;
  CHECK_STATUS(qattn_cache_prefill(rt, &a, NULL), QATTN_BAD_INPUT, "kv_lens is NULL");
  a.kv_lens = lens;
  a.cache_spec = "decode qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a";
  a.k_mean = (const float*)FAKE(0x60000);
  CHECK_STATUS(qattn_cache_prefill(rt, &a, NULL), QATTN_BAD_INPUT, "applies to a quantized K cache");
  qattn_attention_plan* plan = (qattn_attention_plan*)FAKE(0x70000);
  CHECK_STATUS(qattn_cache_prefill_plan_create(rt, &a, 4u, &plan), QATTN_BAD_INPUT, "unknown flags");
  CHECK(plan == NULL);
  a.k_mean = NULL;
  a.cache_spec = "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 arch=sm_90a";
  CHECK_STATUS(qattn_cache_prefill_plan_create(rt, &a, 0u, &plan), QATTN_BAD_INPUT, "flashq");
  CHECK_STATUS(qattn_cache_prefill_plan_create(rt, NULL, 0u, &plan), QATTN_BAD_INPUT, "args is NULL");
  CHECK_STATUS(qattn_cache_prefill_plan_run(rt, NULL, &a, NULL, NULL), QATTN_BAD_INPUT, "plan is NULL");
}

static void check_append_args(qattn_runtime* rt) {
  qattn_append_args a;
  qattn_append_args_init(&a, sizeof a);
  a.spec = INT8_SPEC;
  a.heads_kv = 2, a.n_new = 3;
  a.k = FAKE(0x10000), a.v = FAKE(0x20000);
  a.cache.k = FAKE(0x30000), a.cache.v = FAKE(0x40000);
  a.cache.capacity = 64;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "start");   /* start is NULL */
  a.start = (const int*)FAKE(0x50000);
  a.n_new = 0;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, ">= 1");
  a.n_new = 65;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "do not fit");
  a.n_new = 3;
  a.cache.head_stride = 8;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "16 bytes");
  a.cache.head_stride = 0;
  CHECK_STATUS(qattn_append_kv(rt, NULL, NULL), QATTN_BAD_INPUT, "args is NULL");

  /* Slot mapping: instead of start, for one batch of tokens, with the cache's row count. */
  a.slot_mapping = (const int64_t*)FAKE(0x60000);
  a.num_slots = 64;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "not both");
  a.start = NULL;
  a.num_slots = 0;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "num_slots");
  a.num_slots = 64;
  a.batch = 2;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "batch 1");
  a.batch = 1;
  a.n_new = 200;   /* more tokens than one sequence holds: fine with slots (they spread over the cache) */
  a.cache.capacity = 6;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "multiple of 4");
  a.cache.capacity = 64;
  a.start = (const int*)FAKE(0x50000);
  a.slot_mapping = NULL;

  /* K smoothing and append plans: refused before any GPU work. */
  a.n_new = 3;
  a.init_k_mean = 1;
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_BAD_INPUT, "init_k_mean sets cache.k_mean, which is null");
  {
    qattn_append_plan* plan = (qattn_append_plan*)FAKE(0x70000);
    CHECK_STATUS(qattn_append_plan_create(rt, &a, &plan), QATTN_BAD_INPUT, "init_k_mean sets cache.k_mean");
    CHECK(plan == NULL);
    CHECK_STATUS(qattn_append_plan_create(rt, NULL, &plan), QATTN_BAD_INPUT, "args is NULL");
    CHECK_STATUS(qattn_append_plan_run(rt, NULL, &a, NULL), QATTN_BAD_INPUT, "plan is NULL");
    CHECK(strcmp(qattn_append_plan_kernel_name(NULL), "") == 0);
    qattn_append_plan_destroy(NULL);
  }
  a.init_k_mean = 0;

  {
    qattn_flashq_append_args f;
    qattn_flashq_prefill_args p;
    qattn_flashq_append_args_init(&f, sizeof f);
    f.spec = FLASHQ_SPEC;
    CHECK_STATUS(qattn_flashq_append(rt, &f, NULL), QATTN_BAD_INPUT, "args.cache is NULL");
    qattn_flashq_prefill_args_init(&p, sizeof p);
    p.spec = FLASHQ_SPEC;
    CHECK_STATUS(qattn_flashq_prefill(rt, &p, NULL), QATTN_BAD_INPUT, "args.cache is NULL");
  }
  {
    qattn_tune_decode_options t;
    qattn_tune_decode_options_init(&t, sizeof t);
    t.kv_lens_count = 2;   /* kv_lens NULL */
    CHECK_STATUS(qattn_tune_decode(rt, INT8_SPEC, &t, NULL, 0, NULL), QATTN_BAD_INPUT, "options.kv_lens is NULL");
    t.kv_lens_count = -1;
    CHECK_STATUS(qattn_tune_decode(rt, INT8_SPEC, &t, NULL, 0, NULL), QATTN_BAD_INPUT, "kv_lens_count must be >= 0");
    CHECK_STATUS(qattn_tune_decode(rt, NULL, NULL, NULL, 0, NULL), QATTN_BAD_INPUT, "spec is NULL");
  }
}

/* Compile-only: a decode kernel renders and compiles for an arch without a GPU. */
static void check_compile(qattn_runtime* rt) {
  char name[256] = "";
  CHECK_STATUS(qattn_compile(rt, INT8_SPEC, NULL, name, sizeof name), QATTN_OK, NULL);
  CHECK(strncmp(name, "qattn_decode_", 13) == 0);
}

void check_calibration(void) {
  double maxima[200], lo = 0, hi = 0, lim_lo = 0, lim_hi = 0;
  qattn_unified_max_calibration c;
  qattn_unified_max_options o;
  int i;
  for (i = 0; i < 200; ++i) maxima[i] = 5.0 + 2.0 * sin(i * 0.37);   /* row maxima in [3, 7] */
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  CHECK_STATUS(qattn_calibrate_unified_max(maxima, 200, NULL, &c), QATTN_OK, NULL);
  CHECK(c.enabled == 1 && c.params.enabled == 1 && c.samples == 200 && c.reason[0] == '\0');
  /* every maximum inside the window around phi */
  CHECK(c.max_lo >= 2.9 && c.max_hi <= 7.1 && c.params.phi + c.params.lo < 3 && c.params.phi + c.params.hi > 7);
  for (i = 0; i < 200; ++i) maxima[i] = i % 2 ? 400.0 : -400.0;   /* far too spread out */
  CHECK_STATUS(qattn_calibrate_unified_max(maxima, 200, NULL, &c), QATTN_OK, NULL);
  CHECK(c.enabled == 0 && c.reason[0] != '\0');
  maxima[3] = NAN;
  CHECK_STATUS(qattn_calibrate_unified_max(maxima, 200, NULL, &c), QATTN_BAD_INPUT, NULL);
  CHECK_STATUS(qattn_calibrate_unified_max(NULL, 3, NULL, &c), QATTN_BAD_INPUT, "values is NULL");
  CHECK_STATUS(qattn_calibrate_unified_max(maxima, 3, NULL, NULL), QATTN_BAD_INPUT, "out is NULL");
  qattn_unified_max_options_init(&o, sizeof o);
  CHECK(o.sample == QATTN_SAMPLE_ROW_MAXIMA && o.coverage == 0.9999 && o.window_lo == -9 && o.window_hi == 8);
  o.sample = 7;
  CHECK_STATUS(qattn_calibrate_unified_max(maxima, 3, &o, &c), QATTN_BAD_INPUT, "accepted: 0");
  {
    const float lse[4] = {6.f, 6.5f, 7.f, 6.2f};
    qattn_unified_max_options_init(&o, sizeof o);
    o.sample = QATTN_SAMPLE_ROW_LSE;
    o.keys_per_row = 1024;
    CHECK_STATUS(qattn_calibrate_unified_max_f32(lse, 4, &o, &c), QATTN_OK, NULL);
    CHECK(c.samples == 4 && fabs(c.max_lo - (6.0 - log(1024.0))) < 1e-3 && fabs(c.max_hi - 7.0) < 1e-3);
  }
  CHECK_STATUS(qattn_unified_max_window(INT8_SPEC, &lo, &hi, &lim_lo, &lim_hi), QATTN_OK, NULL);
  CHECK(lo == -9 && hi == 8 && fabs(lim_lo - log(pow(2.0, -14))) < 1e-6 && fabs(lim_hi - log(65504.0)) < 1e-6);
  CHECK_STATUS(qattn_unified_max_window("decode qk=bf16 pv=bf16 out=bf16 d=128", &lo, &hi, NULL, NULL), QATTN_OK, NULL);
  CHECK(lo == -40 && hi == 40);
}

static void check_format_calibration_args(qattn_runtime* rt) {
  const char* ref = "prefill qk=fp16 pv=fp16 out=fp16 d=64";
  const char* no_spec[1] = {NULL};
  qattn_shape shape = {1, 2, 2, 128, 128};
  qattn_tensor t = {FAKE(0x10000), 0, 64, 128};
  qattn_format_calibration_options o;
  CHECK_STATUS(qattn_format_calibration_options_init(&o, sizeof o), QATTN_OK, NULL);
  CHECK(o.min_cosine == 0.999 && o.max_rel_l1 == 0.05 && o.candidates == NULL && o.force == 0 && o.inputs == NULL);
  CHECK_STATUS(qattn_calibrate_format(rt, NULL, ref, shape, t, t, t, &o, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT,
               "layer_key is NULL");
  CHECK_STATUS(qattn_calibrate_format(rt, " layer0", ref, shape, t, t, t, &o, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT,
               "space");
  o.min_cosine = 2;
  CHECK_STATUS(qattn_calibrate_format(rt, "layer0", ref, shape, t, t, t, &o, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT,
               "min cosine 2");
  o.min_cosine = 0.999;
  o.candidates_count = 1;
  CHECK_STATUS(qattn_calibrate_format(rt, "layer0", ref, shape, t, t, t, &o, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT,
               "options.candidates is NULL");
  o.candidates = no_spec;
  CHECK_STATUS(qattn_calibrate_format(rt, "layer0", ref, shape, t, t, t, &o, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT,
               "options.candidates[0] is NULL");
}

void check_decode_validation(qattn_runtime* rt) {
  check_format_calibration_args(rt);
  check_decode_args(rt);
  check_decode_plan_args(rt);
  check_append_args(rt);
  check_attention_over_cache_args(rt);
  check_compile(rt);
}
