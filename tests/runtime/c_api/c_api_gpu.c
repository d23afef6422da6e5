/* The GPU part: tokens appended in two calls with per-sequence starts (the second overwrites the tail
 * of sequence 1), then decode over contiguous and paged caches of several formats and softmax modes,
 * against float64 attention over the unquantized tokens. Outputs are poisoned (NaN) first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"
#include "c_api_gpu_data.h"

#define PAGE 16
#define PAGES_PER_SEQ (T_CAP / PAGE)
#define PAGES 43   /* prime > T_BATCH * PAGES_PER_SEQ: the table below is a permutation */

typedef struct scenario {
  const char* fmt;
  const char* extra;   /* more spec tokens */
  int paged, q_len, splits, calibrate;
} scenario;

static const scenario kScenarios[] = {
    {"int8:per_token", "", 0, 1, 0, 0},
    {"int8:per_token", " paged", 1, 2, 3, 0},
    {"int4:per_token", " paged", 1, 1, 0, 0},
    {"fp8e4m3:per_head", "", 0, 1, 2, 0},
    {"int8:per_token", " softmax=unified_max", 0, 1, 0, 1},
    {"int8:per_token", " softmax=sas paged", 1, 1, 0, 0},
};

void check_flashq_gpu(qattn_runtime* rt, const host_data* h);
void check_tune_decode_gpu(qattn_runtime* rt);
void check_format_calibration_gpu(qattn_runtime* rt);
void check_varlen_gpu(qattn_runtime* rt);
void check_linear_gpu(qattn_runtime* rt);

static devptr upload(const void* host, size_t bytes) {
  const devptr p = dev_alloc(bytes);
  if (p) dev_upload(p, host, bytes);
  return p;
}

static double max_abs_diff(const double* a, const double* b, size_t n) {
  double m = 0;
  size_t i;
  for (i = 0; i < n; ++i) m = isfinite(b[i]) ? fmax(m, fabs(a[i] - b[i])) : INFINITY;
  return m;
}

/* The kernel against float64 attention over the unquantized tokens, within the format's own error
 * (float64 attention over the tokens rounded as the cache stores them) x 1.25 + 0.02: a lossy format
 * passes, a wrong kernel does not. */
typedef struct verdict_inputs {
  const double *exact, *format, *got, *exact_lse, *format_lse, *got_lse;
  size_t out_elems, rows;
} verdict_inputs;

static void judge(const char* what, const verdict_inputs* in) {
  const metrics m = compare(in->exact, in->got, in->out_elems);
  const metrics f = compare(in->exact, in->format, in->out_elems);
  const double lse_err = max_abs_diff(in->exact_lse, in->got_lse, in->rows);
  const double lse_fmt = in->format_lse ? max_abs_diff(in->exact_lse, in->format_lse, in->rows) : 0;
  fprintf(stderr, "   %s: cos %.6f rel_l2 %.4f max_abs %.4f non-finite %lld | format alone: cos %.6f rel_l2 %.4f | "
          "lse max err %.4f (format %.4f)\n", what, m.cosine, m.rel_l2, m.max_abs, m.non_finite, f.cosine, f.rel_l2,
          lse_err, lse_fmt);
  CHECK(m.non_finite == 0);
  CHECK(m.rel_l2 <= 1.25 * f.rel_l2 + 0.02);
  CHECK(m.cosine >= 1.0 - (1.25 * (1.0 - f.cosine) + 0.002));
  if (in->got_lse) CHECK(lse_err <= 1.25 * lse_fmt + 0.02);
}

/* The same call through a decode plan made without its pointers, run on a caller's workspace into a
 * fresh output: the kernel, the split count and the bits of qattn_decode (`want`). */
static void check_plan_bits(qattn_runtime* rt, const qattn_decode_args* d, const char* name, int splits,
                            const uint16_t* want, size_t out_elems) {
  qattn_decode_plan* plan = NULL;
  qattn_decode_args pd = *d;
  int64_t ws_bytes = -1;
  devptr ws = 0, o = dev_alloc(2 * out_elems);
  uint16_t* got = malloc(2 * out_elems);
  pd.q.data = NULL, pd.o.data = NULL, pd.cache.k = pd.cache.v = NULL, pd.cache.block_table = NULL;
  pd.cache.k_head_scale = pd.cache.v_head_scale = NULL, pd.kv_lens = NULL, pd.lse = NULL;
  CHECK_STATUS(qattn_decode_plan_create(rt, &pd, QATTN_PLAN_CALLER_WORKSPACE, &plan), QATTN_OK, NULL);
  CHECK_STATUS(qattn_decode_plan_workspace_bytes(plan, &ws_bytes), QATTN_OK, NULL);
  CHECK(ws_bytes >= 0 && (ws_bytes > 0) == (splits > 1 || strstr(d->spec, "unified_max") != NULL));
  CHECK(qattn_decode_plan_splits(plan) == splits);
  CHECK(strcmp(qattn_decode_plan_kernel_name(plan), name) == 0);
  if (ws_bytes > 0) {
    CHECK_STATUS(qattn_decode_plan_run(rt, plan, d, NULL, NULL), QATTN_BAD_INPUT, "pass workspace");
    ws = dev_alloc((size_t)ws_bytes);
  }
  dev_fill(o, 0xff, 2 * out_elems);
  pd = *d;
  pd.o.data = DEV(o);
  CHECK_STATUS(qattn_decode_plan_run(rt, plan, &pd, ws ? DEV(ws) : NULL, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(got, o, 2 * out_elems);
  CHECK(memcmp(got, want, 2 * out_elems) == 0);
  fprintf(stderr, "   plan: %lld workspace bytes, %s bits as qattn_decode\n", (long long)ws_bytes,
          memcmp(got, want, 2 * out_elems) == 0 ? "the same" : "OTHER");
  qattn_decode_plan_destroy(plan);
  dev_free(o), dev_free(ws);
  free(got);
}

static void run_scenario(qattn_runtime* rt, const host_data* h, const double* k, const double* v, const scenario* s) {
  char spec[160], name[256] = "", flow[16] = "";
  const size_t rows = (size_t)T_BATCH * T_HQ * s->q_len, out_elems = rows * T_D;
  const int zeros[T_BATCH] = {0, 0};
  int table[T_BATCH * PAGES_PER_SEQ], i, route_splits = 0;
  int64_t cache_bytes = 0;
  float scales[2][T_HKV];
  double *exact = malloc(sizeof(double) * out_elems), *exact_lse = malloc(sizeof(double) * rows);
  double *format = malloc(sizeof(double) * out_elems), *format_lse = malloc(sizeof(double) * rows);
  double *got = malloc(sizeof(double) * out_elems), *got_lse = malloc(sizeof(double) * rows);
  double *kr = malloc(sizeof(double) * T_CACHE_ELEMS), *vr = malloc(sizeof(double) * T_CACHE_ELEMS);
  uint16_t* o_host = malloc(2 * out_elems);
  float* lse_host = malloc(sizeof(float) * rows);
  devptr k1, v1, k2, v2, q, o, lse, kc, vc, starts0, starts2, lens, bt = 0, ks = 0, vs = 0;
  qattn_append_args a;
  qattn_decode_args d;
  verdict_inputs in;

  snprintf(spec, sizeof spec, "decode qk=%s pv=%s out=fp16 d=%d gqa=%d%s", s->fmt, s->fmt, T_D, T_GQA, s->extra);
  fprintf(stderr, "-- %s (q_len %d, splits %d)\n", spec, s->q_len, s->splits);
  CHECK_STATUS(qattn_kv_cache_bytes(spec, s->paged ? PAGES : T_BATCH, T_HKV, s->paged ? PAGE : T_CAP, &cache_bytes), QATTN_OK, NULL);
  for (i = 0; i < T_BATCH * PAGES_PER_SEQ; ++i) table[i] = (i * 5 + 3) % PAGES;
  k1 = upload(h->k1, sizeof h->k1), v1 = upload(h->v1, sizeof h->v1);
  k2 = upload(h->k2, sizeof h->k2), v2 = upload(h->v2, sizeof h->v2);
  q = upload(h->q, 2 * out_elems);
  starts0 = upload(zeros, sizeof zeros), starts2 = upload(start2, sizeof start2), lens = upload(kv_lens, sizeof kv_lens);
  kc = dev_alloc((size_t)cache_bytes), vc = dev_alloc((size_t)cache_bytes);
  o = dev_alloc(2 * out_elems), lse = dev_alloc(sizeof(float) * rows);
  dev_fill(o, 0xff, 2 * out_elems);   /* fp16 NaN */
  dev_fill(lse, 0xff, sizeof(float) * rows);

  qattn_append_args_init(&a, sizeof a);
  a.spec = spec;
  a.batch = T_BATCH, a.heads_kv = T_HKV;
  a.cache.k = DEV(kc), a.cache.v = DEV(vc);
  if (s->paged) {
    bt = upload(table, sizeof table);
    a.cache.page_size = PAGE, a.cache.block_table = (const int*)DEV(bt), a.cache.table_stride = PAGES_PER_SEQ;
  } else {
    a.cache.capacity = T_CAP;
  }
  head_scales(k, T_CAP, scales[0]);
  head_scales(v, T_CAP, scales[1]);
  if (strncmp(s->fmt, "fp8", 3) == 0) {
    ks = upload(scales[0], sizeof scales[0]), vs = upload(scales[1], sizeof scales[1]);
    a.cache.k_head_scale = (const float*)DEV(ks), a.cache.v_head_scale = (const float*)DEV(vs);
  }
  a.n_new = T_N1, a.k = DEV(k1), a.v = DEV(v1), a.start = (const int*)DEV(starts0);
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_OK, NULL);
  a.n_new = T_N2, a.k = DEV(k2), a.v = DEV(v2), a.start = (const int*)DEV(starts2);
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_OK, NULL);

  reference(h, k, v, s->q_len, kv_lens, exact, exact_lse);
  memcpy(kr, k, sizeof(double) * T_CACHE_ELEMS);
  memcpy(vr, v, sizeof(double) * T_CACHE_ELEMS);
  round_like_cache(s->fmt, kr, scales[0]);
  round_like_cache(s->fmt, vr, scales[1]);
  reference(h, kr, vr, s->q_len, kv_lens, format, format_lse);

  qattn_decode_args_init(&d, sizeof d);
  d.spec = spec;
  d.shape.batch = T_BATCH, d.shape.heads_q = T_HQ, d.shape.heads_kv = T_HKV, d.shape.q_len = s->q_len, d.shape.kv_len = T_CAP;
  d.q.data = DEV(q), d.o.data = DEV(o);
  d.cache = a.cache;
  d.kv_lens = (const int*)DEV(lens);
  d.lse = (float*)DEV(lse);
  d.splits = s->splits;
  if (s->calibrate) {   /* phi from the exact rows' LSE, as an engine would from earlier steps */
    qattn_unified_max_options uo;
    qattn_unified_max_calibration cal;
    qattn_unified_max_options_init(&uo, sizeof uo);
    uo.sample = QATTN_SAMPLE_ROW_LSE, uo.keys_per_row = T_CAP;
    cal.struct_size = sizeof cal;
    CHECK_STATUS(qattn_calibrate_unified_max(exact_lse, rows, &uo, &cal), QATTN_OK, NULL);
    CHECK(cal.enabled == 1);
    d.unified_max = cal.params;
  }
  CHECK_STATUS(qattn_decode_route(rt, &d, name, sizeof name, flow, sizeof flow, &route_splits), QATTN_OK, NULL);
  CHECK(strncmp(name, "qattn_decode", 12) == 0 && (strcmp(flow, "mma") == 0 || strcmp(flow, "gemv") == 0));
  CHECK(route_splits >= 1 && (s->splits == 0 || route_splits == s->splits));
  CHECK_STATUS(qattn_decode(rt, &d, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(o_host, o, 2 * out_elems);
  dev_download(lse_host, lse, sizeof(float) * rows);
  for (i = 0; i < (int)out_elems; ++i) got[i] = half_to_float(o_host[i]);
  for (i = 0; i < (int)rows; ++i) got_lse[i] = lse_host[i];
  fprintf(stderr, "   kernel %s, flow %s, %d split(s)\n", name, flow, route_splits);
  in.exact = exact, in.format = format, in.got = got;
  in.exact_lse = exact_lse, in.format_lse = format_lse, in.got_lse = got_lse;
  in.out_elems = out_elems, in.rows = rows;
  judge(s->fmt, &in);
  check_plan_bits(rt, &d, name, route_splits, o_host, out_elems);
  if (s->calibrate) {
    int64_t fallback = -1;
    CHECK_STATUS(qattn_decode_fallback_rows(rt, NULL, &fallback), QATTN_OK, NULL);
    CHECK(fallback >= 0 && fallback <= (int64_t)rows);
  }
  dev_free(k1), dev_free(v1), dev_free(k2), dev_free(v2), dev_free(q), dev_free(o), dev_free(lse);
  dev_free(kc), dev_free(vc), dev_free(starts0), dev_free(starts2), dev_free(lens), dev_free(bt), dev_free(ks), dev_free(vs);
  free(exact), free(exact_lse), free(format), free(format_lse), free(got), free(got_lse), free(kr), free(vr);
  free(o_host), free(lse_host);
}

int run_gpu_checks(void) {
  static host_data h;
  char why[200];
  qattn_options o;
  qattn_runtime* rt = NULL;
  size_t i;
  if (cuda_open(why, sizeof why) != 0) {
    printf("skipped: %s\n", why);
    return C_API_SKIP;
  }
  qattn_options_init(&o, sizeof o);
  o.cache_path = "c_api_gpu_cache.db";   /* in the test's working directory, fresh each run */
  remove(o.cache_path);
  o.tune = 0;
  CHECK_STATUS(qattn_runtime_open(&o, &rt), QATTN_OK, NULL);
  if (!rt) return 1;
  make_data(&h, 2026);
  {
    double *k = malloc(sizeof(double) * T_CACHE_ELEMS), *v = malloc(sizeof(double) * T_CACHE_ELEMS);
    cache_tokens(&h, start2, k, v);
    for (i = 0; i < sizeof kScenarios / sizeof kScenarios[0]; ++i) run_scenario(rt, &h, k, v, &kScenarios[i]);
    free(k), free(v);
  }
  check_flashq_gpu(rt, &h);
  check_tune_decode_gpu(rt);
  check_format_calibration_gpu(rt);
  check_varlen_gpu(rt);
  check_linear_gpu(rt);
  qattn_runtime_destroy(rt);
  return 0;
}
