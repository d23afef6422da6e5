/* The GPU part's variable-length prefill: one qattn_attention_varlen call over three packed sequences of
 * different lengths against one qattn_attention call per sequence (batch 1, its exact lengths) on the
 * same rows. Each sequence's rows see the same arithmetic in both: the kernel walks the sequence's own
 * keys with the same tiling (the runtime is untuned and a varlen kernel takes the default tiling of its
 * equal-length twin), and the quantizers scale per token and take per-channel statistics over the
 * sequence's own tokens. So outputs and LSE must match bit for bit. A float64 reference guards against
 * both sides being wrong alike, and poisoned rows past the packed outputs must stay untouched. A plan of
 * the same call (qattn_attention_plan_create with QATTN_PLAN_VARLEN) must give the varlen call's bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"
#include "c_api_host.h"

#define V_BATCH 3
#define V_HQ 4
#define V_HKV 2
#define V_D 128
#define V_GUARD 2   /* poisoned rows after each packed output */

/* Query / key lengths: a single token, a chunk over a longer cached prefix (causal aligned at the end),
 * and a sequence longer than one tile of every tiling. */
static const int kLensQ[V_BATCH] = {1, 17, 130};
static const int kLensKv[V_BATCH] = {1, 40, 130};

typedef struct varlen_case {
  const char* spec;
  double max_rel_l2, max_lse_err;   /* against float64: loose sanity bounds, not the test's point */
} varlen_case;

static const varlen_case kCases[] = {
    {"prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=2", 0.01, 0.01},
    {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=2 smooth=k", 0.08, 0.1},
};

typedef struct packed_data {
  int cu_q[V_BATCH + 1], cu_kv[V_BATCH + 1];
  int total_q, total_kv;
  uint16_t *q, *k, *v;   /* [total, heads, d] fp16 bits */
} packed_data;

static void make_packed(packed_data* p, uint64_t seed) {
  uint64_t state = seed;
  size_t i, nq, nkv;
  int b;
  p->cu_q[0] = p->cu_kv[0] = 0;
  for (b = 0; b < V_BATCH; ++b) {
    p->cu_q[b + 1] = p->cu_q[b] + kLensQ[b];
    p->cu_kv[b + 1] = p->cu_kv[b] + kLensKv[b];
  }
  p->total_q = p->cu_q[V_BATCH], p->total_kv = p->cu_kv[V_BATCH];
  nq = (size_t)p->total_q * V_HQ * V_D, nkv = (size_t)p->total_kv * V_HKV * V_D;
  p->q = malloc(2 * nq), p->k = malloc(2 * nkv), p->v = malloc(2 * nkv);
  for (i = 0; i < nq; ++i) p->q[i] = float_to_half((float)next_normal(&state));
  for (i = 0; i < nkv; ++i) {   /* K with outlier channels (what smooth=k removes), V standard normal */
    const double x = next_normal(&state);
    p->k[i] = float_to_half((float)(i % V_D % 32 == 5 ? 6.0 + 3.0 * x : x));
    p->v[i] = float_to_half((float)next_normal(&state));
  }
}

/* float64 causal attention of every packed query row: o [total_q][hq][d], lse [total_q][hq]. */
static void reference(const packed_data* p, double* o, double* lse) {
  const double scale = 1.0 / sqrt((double)V_D);
  double s[256];
  int b, h, i, j, c;
  for (b = 0; b < V_BATCH; ++b)
    for (i = 0; i < kLensQ[b]; ++i)
      for (h = 0; h < V_HQ; ++h) {
        const size_t row = (size_t)(p->cu_q[b] + i) * V_HQ + h;
        const int visible = i + kLensKv[b] - kLensQ[b] + 1;   /* keys j <= i + kv_len - q_len */
        double m = -INFINITY, sum = 0;
        for (j = 0; j < visible; ++j) {
          const uint16_t* k = p->k + ((size_t)(p->cu_kv[b] + j) * V_HKV + h / (V_HQ / V_HKV)) * V_D;
          double dot = 0;
          for (c = 0; c < V_D; ++c) dot += half_to_float(p->q[row * V_D + c]) * half_to_float(k[c]);
          s[j] = scale * dot;
          if (s[j] > m) m = s[j];
        }
        for (j = 0; j < visible; ++j) sum += (s[j] = exp(s[j] - m));
        for (c = 0; c < V_D; ++c) {
          double acc = 0;
          for (j = 0; j < visible; ++j)
            acc += s[j] * half_to_float(p->v[((size_t)(p->cu_kv[b] + j) * V_HKV + h / (V_HQ / V_HKV)) * V_D + c]);
          o[row * V_D + c] = acc / sum;
        }
        lse[row] = m + log(sum);
      }
}

static devptr upload(const void* host, size_t bytes) {
  const devptr p = dev_alloc(bytes);
  if (p) dev_upload(p, host, bytes);
  return p;
}

/* Packed [tokens, heads, d] from row `first` on (the batch stride is unused by varlen calls and covers
 * the whole sequence for the batch-1 calls). */
static qattn_tensor packed_tensor(devptr base, int first, int tokens, int heads) {
  qattn_tensor t;
  t.data = DEV(base + (devptr)first * heads * V_D * 2);
  t.sb = (int64_t)tokens * heads * V_D, t.sh = V_D, t.ss = (int64_t)heads * V_D;
  return t;
}

static int count_poison_lost(const void* bytes, size_t n) {
  const unsigned char* b = bytes;
  size_t i;
  int lost = 0;
  for (i = 0; i < n; ++i) lost += b[i] != 0xff;
  return lost;
}

static void run_case(qattn_runtime* rt, const packed_data* p, const double* ref_o, const double* ref_lse,
                     const varlen_case* vc) {
  const size_t o_elems = (size_t)p->total_q * V_HQ * V_D, rows = (size_t)p->total_q * V_HQ;
  const size_t o_bytes = 2 * (o_elems + (size_t)V_GUARD * V_HQ * V_D);
  const size_t lse_bytes = sizeof(float) * (rows + V_GUARD * V_HQ);
  const qattn_shape bounds = {V_BATCH, V_HQ, V_HKV, 130, 130};
  uint16_t *o_var = malloc(o_bytes), *o_seq = malloc(o_bytes);
  float *lse_var = malloc(lse_bytes), *lse_seq = malloc(lse_bytes);
  double *got = malloc(sizeof(double) * o_elems), *got_lse = malloc(sizeof(double) * rows);
  devptr q = upload(p->q, 2 * o_elems), k = upload(p->k, 2 * (size_t)p->total_kv * V_HKV * V_D);
  devptr v = upload(p->v, 2 * (size_t)p->total_kv * V_HKV * V_D);
  devptr cu_q = upload(p->cu_q, sizeof p->cu_q), cu_kv = upload(p->cu_kv, sizeof p->cu_kv);
  devptr dov = dev_alloc(o_bytes), dos = dev_alloc(o_bytes), dlv = dev_alloc(lse_bytes), dls = dev_alloc(lse_bytes);
  devptr dop = dev_alloc(o_bytes), dlp = dev_alloc(lse_bytes);
  uint16_t* o_plan = malloc(o_bytes);
  float* lse_plan = malloc(lse_bytes);
  qattn_attention_plan* plan = NULL;
  const qattn_tensor unset_q = packed_tensor(0, 0, p->total_q, V_HQ), unset_kv = packed_tensor(0, 0, p->total_kv, V_HKV);
  size_t i, differ = 0, lse_differ = 0, plan_differ = 0;
  int b, h, t;
  metrics m;
  double lse_err = 0;

  fprintf(stderr, "-- varlen %s (q lens %d %d %d, kv lens %d %d %d)\n", vc->spec, kLensQ[0], kLensQ[1], kLensQ[2],
          kLensKv[0], kLensKv[1], kLensKv[2]);
  dev_fill(dov, 0xff, o_bytes), dev_fill(dos, 0xff, o_bytes);   /* fp16 / fp32 NaN */
  dev_fill(dlv, 0xff, lse_bytes), dev_fill(dls, 0xff, lse_bytes);
  dev_fill(dop, 0xff, o_bytes), dev_fill(dlp, 0xff, lse_bytes);
  CHECK_STATUS(qattn_attention_plan_create(rt, vc->spec, bounds, unset_q, unset_kv, unset_kv, unset_q, QATTN_PLAN_VARLEN,
                                           &plan),
               QATTN_OK, NULL);
  CHECK_STATUS(qattn_attention_plan_run(rt, plan, DEV(q), DEV(k), DEV(v), DEV(dop), (float*)DEV(dlp), (const int*)DEV(cu_q),
                                        (const int*)DEV(cu_kv), 0.f, NULL, NULL),
               QATTN_OK, NULL);
  CHECK_STATUS(qattn_attention_varlen(rt, vc->spec, bounds, packed_tensor(q, 0, p->total_q, V_HQ),
                                      packed_tensor(k, 0, p->total_kv, V_HKV), packed_tensor(v, 0, p->total_kv, V_HKV),
                                      packed_tensor(dov, 0, p->total_q, V_HQ), (const int*)DEV(cu_q),
                                      (const int*)DEV(cu_kv), 0.f, (float*)DEV(dlv), NULL),
               QATTN_OK, NULL);
  for (b = 0; b < V_BATCH; ++b) {   /* sequence b alone; its LSE [1][hq][len] where its packed rows start */
    const qattn_shape one = {1, V_HQ, V_HKV, kLensQ[b], kLensKv[b]};
    CHECK_STATUS(qattn_attention(rt, vc->spec, one, packed_tensor(q, p->cu_q[b], kLensQ[b], V_HQ),
                                 packed_tensor(k, p->cu_kv[b], kLensKv[b], V_HKV),
                                 packed_tensor(v, p->cu_kv[b], kLensKv[b], V_HKV),
                                 packed_tensor(dos, p->cu_q[b], kLensQ[b], V_HQ), 0.f,
                                 (float*)DEV(dls + sizeof(float) * (devptr)p->cu_q[b] * V_HQ), NULL),
                 QATTN_OK, NULL);
  }
  dev_sync();
  dev_download(o_var, dov, o_bytes), dev_download(o_seq, dos, o_bytes);
  dev_download(lse_var, dlv, lse_bytes), dev_download(lse_seq, dls, lse_bytes);
  dev_download(o_plan, dop, o_bytes), dev_download(lse_plan, dlp, lse_bytes);
  qattn_attention_plan_destroy(plan);
  for (i = 0; i < o_elems; ++i) plan_differ += o_plan[i] != o_var[i];
  for (i = 0; i < rows; ++i) plan_differ += memcmp(&lse_plan[i], &lse_var[i], sizeof(float)) != 0;

  for (i = 0; i < o_elems; ++i) differ += o_var[i] != o_seq[i];
  for (b = 0; b < V_BATCH; ++b)
    for (t = 0; t < kLensQ[b]; ++t)
      for (h = 0; h < V_HQ; ++h) {
        const size_t packed_row = (size_t)(p->cu_q[b] + t) * V_HQ + h;   /* varlen: [total_q][hq] */
        const size_t alone = (size_t)p->cu_q[b] * V_HQ + (size_t)h * kLensQ[b] + t;   /* [1][hq][len] */
        lse_differ += memcmp(&lse_var[packed_row], &lse_seq[alone], sizeof(float)) != 0;
        got_lse[packed_row] = lse_var[packed_row];
        lse_err = fmax(lse_err, isfinite(got_lse[packed_row]) ? fabs(got_lse[packed_row] - ref_lse[packed_row])
                                                             : INFINITY);
      }
  for (i = 0; i < o_elems; ++i) got[i] = half_to_float(o_var[i]);
  m = compare(ref_o, got, o_elems);
  fprintf(stderr, "   varlen vs per-sequence: %zu of %zu outputs and %zu of %zu LSE differ in bits | vs float64: "
          "rel_l2 %.5f cos %.6f non-finite %lld, lse max err %.5f\n", differ, o_elems, lse_differ, rows, m.rel_l2,
          m.cosine, m.non_finite, lse_err);
  fprintf(stderr, "   plan vs varlen call: %zu values differ in bits\n", plan_differ);
  CHECK(differ == 0);
  CHECK(lse_differ == 0);
  CHECK(plan_differ == 0);
  CHECK(m.non_finite == 0 && m.rel_l2 <= vc->max_rel_l2);
  CHECK(lse_err <= vc->max_lse_err);
  CHECK(count_poison_lost(o_var + o_elems, o_bytes - 2 * o_elems) == 0);
  CHECK(count_poison_lost(lse_var + rows, lse_bytes - sizeof(float) * rows) == 0);

  dev_free(q), dev_free(k), dev_free(v), dev_free(cu_q), dev_free(cu_kv);
  dev_free(dov), dev_free(dos), dev_free(dlv), dev_free(dls), dev_free(dop), dev_free(dlp);
  free(o_var), free(o_seq), free(lse_var), free(lse_seq), free(got), free(got_lse), free(o_plan), free(lse_plan);
}

void check_varlen_gpu(qattn_runtime* rt) {
  packed_data p;
  double *ref_o, *ref_lse;
  size_t i;
  make_packed(&p, 77);
  ref_o = malloc(sizeof(double) * p.total_q * V_HQ * V_D);
  ref_lse = malloc(sizeof(double) * p.total_q * V_HQ);
  reference(&p, ref_o, ref_lse);
  for (i = 0; i < sizeof kCases / sizeof kCases[0]; ++i) run_case(rt, &p, ref_o, ref_lse, &kCases[i]);
  free(ref_o), free(ref_lse), free(p.q), free(p.k), free(p.v);
}
