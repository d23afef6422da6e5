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
  double min_cos, max_rel, max_lse_err;
} scenario;

static const scenario kScenarios[] = {
    {"int8:per_token", "", 0, 1, 0, 0, 0.999, 0.05, 0.02},
    {"int8:per_token", " paged", 1, 2, 3, 0, 0.999, 0.05, 0.02},
    {"int4:per_token", " paged", 1, 1, 0, 0, 0.95, 0.30, 0.30},
    {"fp8e4m3:per_head", "", 0, 1, 2, 0, 0.995, 0.10, 0.10},
    {"int8:per_token", " softmax=unified_max", 0, 1, 0, 1, 0.999, 0.05, 0.02},
    {"int8:per_token", " softmax=sas paged", 1, 1, 0, 0, 0.99, 0.10, 0.10},
};

void check_flashq_gpu(qattn_runtime* rt, const host_data* h);
void check_tune_decode_gpu(qattn_runtime* rt);

static void head_scales(const uint16_t* a, const uint16_t* b, float* out) {
  int kh;
  size_t i;
  for (kh = 0; kh < T_HKV; ++kh) out[kh] = 0;
  for (i = 0; i < (size_t)T_BATCH * T_HKV * T_N1 * T_D; ++i) {
    const int kh_of = (int)(i / ((size_t)T_N1 * T_D) % T_HKV);
    const float x = fabsf(half_to_float(a[i]));
    if (x > out[kh_of]) out[kh_of] = x;
  }
  for (i = 0; i < (size_t)T_BATCH * T_HKV * T_N2 * T_D; ++i) {
    const int kh_of = (int)(i / ((size_t)T_N2 * T_D) % T_HKV);
    const float x = fabsf(half_to_float(b[i]));
    if (x > out[kh_of]) out[kh_of] = x;
  }
  for (kh = 0; kh < T_HKV; ++kh) out[kh] /= 448.f;
}

static devptr upload(const void* host, size_t bytes) {
  const devptr p = dev_alloc(bytes);
  if (p) dev_upload(p, host, bytes);
  return p;
}

static void run_scenario(qattn_runtime* rt, const host_data* h, const scenario* s) {
  char spec[160], name[256] = "", flow[16] = "";
  const size_t rows = (size_t)T_BATCH * T_HQ * s->q_len, out_elems = rows * T_D;
  const int zeros[T_BATCH] = {0, 0};
  int table[T_BATCH * PAGES_PER_SEQ], i, route_splits = 0;
  int64_t cache_bytes = 0;
  float scales[2][T_HKV];
  double *ref = malloc(sizeof(double) * out_elems), *ref_lse = malloc(sizeof(double) * rows);
  double *got = malloc(sizeof(double) * out_elems), *got_lse = malloc(sizeof(double) * rows);
  uint16_t* o_host = malloc(2 * out_elems);
  float* lse_host = malloc(sizeof(float) * rows);
  devptr k1, v1, k2, v2, q, o, lse, kc, vc, starts0, starts2, lens, bt = 0, ks = 0, vs = 0;
  qattn_append_args a;
  qattn_decode_args d;
  metrics m, ml = {0, 0, 0, 0};

  snprintf(spec, sizeof spec, "decode qk=%s pv=%s out=fp16 d=%d gqa=%d%s", s->fmt, s->fmt, T_D, T_GQA, s->extra);
  fprintf(stderr, "-- %s\n", spec);
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
  if (strncmp(s->fmt, "fp8", 3) == 0) {
    head_scales(h->k1, h->k2, scales[0]);
    head_scales(h->v1, h->v2, scales[1]);
    ks = upload(scales[0], sizeof scales[0]), vs = upload(scales[1], sizeof scales[1]);
    a.cache.k_head_scale = (const float*)DEV(ks), a.cache.v_head_scale = (const float*)DEV(vs);
  }
  a.n_new = T_N1, a.k = DEV(k1), a.v = DEV(v1), a.start = (const int*)DEV(starts0);
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_OK, NULL);
  a.n_new = T_N2, a.k = DEV(k2), a.v = DEV(v2), a.start = (const int*)DEV(starts2);
  CHECK_STATUS(qattn_append_kv(rt, &a, NULL), QATTN_OK, NULL);

  reference(h, start2, s->q_len, kv_lens, ref, ref_lse);
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
    CHECK_STATUS(qattn_calibrate_unified_max(ref_lse, rows, &uo, &cal), QATTN_OK, NULL);
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
  m = compare(ref, got, out_elems);
  for (i = 0; i < (int)rows; ++i) {
    const double e = fabs(got_lse[i] - ref_lse[i]);
    if (!isfinite(got_lse[i])) ++ml.non_finite;
    else if (e > ml.max_abs) ml.max_abs = e;
  }
  fprintf(stderr, "   %s flow %s splits %d: cos %.6f rel_l2 %.4f max_abs %.4f non-finite %lld; lse max err %.4f (%lld non-finite)\n",
          name, flow, route_splits, m.cosine, m.rel_l2, m.max_abs, m.non_finite, ml.max_abs, ml.non_finite);
  CHECK(m.non_finite == 0 && ml.non_finite == 0);
  CHECK(m.cosine >= s->min_cos && m.rel_l2 <= s->max_rel && ml.max_abs <= s->max_lse_err);
  if (s->calibrate) {
    int64_t fallback = -1;
    CHECK_STATUS(qattn_decode_fallback_rows(rt, NULL, &fallback), QATTN_OK, NULL);
    CHECK(fallback >= 0 && fallback <= (int64_t)rows);
  }
  dev_free(k1), dev_free(v1), dev_free(k2), dev_free(v2), dev_free(q), dev_free(o), dev_free(lse);
  dev_free(kc), dev_free(vc), dev_free(starts0), dev_free(starts2), dev_free(lens), dev_free(bt), dev_free(ks), dev_free(vs);
  free(ref), free(ref_lse), free(got), free(got_lse), free(o_host), free(lse_host);
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
  for (i = 0; i < sizeof kScenarios / sizeof kScenarios[0]; ++i) run_scenario(rt, &h, &kScenarios[i]);
  check_flashq_gpu(rt, &h);
  check_tune_decode_gpu(rt);
  qattn_runtime_destroy(rt);
  return 0;
}
