/* The GPU part's FlashQ cache (prefill of the first T_N1 tokens, chosen bit widths and scales, one
 * appended token, decode against float64) and a small decode tuning sweep stored in the cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"
#include "c_api_gpu_data.h"

#define FQ_SPEC "decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 gqa=4"
#define FQ_BLOCKS 4   /* blocks of 64 tokens per sequence: T_N1 + 1 tokens need 3, the buffer the rest */

void check_flashq_gpu(qattn_runtime* rt, const host_data* h) {
  const size_t rows = (size_t)T_BATCH * T_HQ, out_elems = rows * T_D;
  const size_t new_bytes = (size_t)T_BATCH * T_HKV * T_D * 2;
  int k_bits[T_HKV] = {0, 0}, v_bits[T_HKV] = {0, 0}, i, lens_host[2 * T_BATCH];
  int64_t page = 0, buffer = 0;
  double *ref = malloc(sizeof(double) * out_elems), *ref_lse = malloc(sizeof(double) * rows);
  double* got = malloc(sizeof(double) * out_elems);
  uint16_t *o_host = malloc(2 * out_elems), *k_new = malloc(new_bytes), *v_new = malloc(new_bytes);
  devptr kb, vb, kbuf, vbuf, heads, clens, blens, ks, vs, k1, v1, kn, vn, q, o;
  qattn_flashq_cache fq;
  qattn_flashq_prefill_args p;
  qattn_flashq_append_args a;
  qattn_decode_args d;
  metrics m;

  fprintf(stderr, "-- %s\n", FQ_SPEC);
  CHECK_STATUS(qattn_flashq_page_bytes(T_D, T_HKV, NULL, &page), QATTN_OK, NULL);
  CHECK_STATUS(qattn_flashq_buffer_bytes(T_D, T_BATCH, T_HKV, &buffer), QATTN_OK, NULL);
  for (i = 0; i < T_BATCH * T_HKV * T_D; ++i) {   /* the new token: chunk 2's first of each (b, head) */
    const size_t from = (size_t)(i / T_D) * T_N2 * T_D + (size_t)(i % T_D);
    k_new[i] = h->k2[from];
    v_new[i] = h->v2[from];
  }
  kb = dev_alloc((size_t)(page * T_BATCH * FQ_BLOCKS)), vb = dev_alloc((size_t)(page * T_BATCH * FQ_BLOCKS));
  kbuf = dev_alloc((size_t)buffer), vbuf = dev_alloc((size_t)buffer);
  heads = dev_alloc(sizeof(int) * 4 * T_HKV), clens = dev_alloc(sizeof(int) * T_BATCH), blens = dev_alloc(sizeof(int) * T_BATCH);
  ks = dev_alloc(sizeof(float) * T_HKV), vs = dev_alloc(sizeof(float) * T_HKV);
  k1 = dev_alloc(sizeof h->k1), v1 = dev_alloc(sizeof h->v1), kn = dev_alloc(new_bytes), vn = dev_alloc(new_bytes);
  q = dev_alloc(2 * out_elems), o = dev_alloc(2 * out_elems);
  dev_upload(k1, h->k1, sizeof h->k1), dev_upload(v1, h->v1, sizeof h->v1);
  dev_upload(kn, k_new, new_bytes), dev_upload(vn, v_new, new_bytes), dev_upload(q, h->q, 2 * out_elems);
  dev_fill(o, 0xff, 2 * out_elems);

  memset(&fq, 0, sizeof fq);
  fq.k_blocks = DEV(kb), fq.v_blocks = DEV(vb);
  fq.k_page_stride = fq.v_page_stride = page;   /* the 4-bit upper bound: any chosen bits fit */
  fq.max_blocks = FQ_BLOCKS;
  fq.heads = (int*)DEV(heads);
  fq.k_bits = k_bits, fq.v_bits = v_bits;       /* all 0: chosen by the prefill */
  fq.k_buffer = DEV(kbuf), fq.v_buffer = DEV(vbuf);
  fq.compressed_lens = (int*)DEV(clens), fq.buffer_lens = (int*)DEV(blens);
  fq.k_scale8 = (float*)DEV(ks), fq.v_scale8 = (float*)DEV(vs);

  qattn_flashq_prefill_args_init(&p, sizeof p);
  p.spec = FQ_SPEC;
  p.batch = T_BATCH, p.heads_kv = T_HKV, p.n = T_N1, p.n_low = 0;   /* every head at 4 bits */
  p.k = DEV(k1), p.v = DEV(v1);
  p.cache = &fq;
  CHECK_STATUS(qattn_flashq_prefill(rt, &p, NULL), QATTN_OK, NULL);
  for (i = 0; i < T_HKV; ++i) CHECK(k_bits[i] == 4 && v_bits[i] == 4);
  CHECK(fq.k_page_stride == page);

  qattn_flashq_append_args_init(&a, sizeof a);
  a.spec = FQ_SPEC;
  a.batch = T_BATCH, a.heads_kv = T_HKV, a.n_new = 1;
  a.k = DEV(kn), a.v = DEV(vn);
  a.cache = &fq;
  CHECK_STATUS(qattn_flashq_append(rt, &a, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(lens_host, clens, sizeof(int) * T_BATCH);
  dev_download(lens_host + T_BATCH, blens, sizeof(int) * T_BATCH);
  for (i = 0; i < T_BATCH; ++i) CHECK(lens_host[i] == 192 && lens_host[T_BATCH + i] == T_N1 + 1 - 192);

  qattn_decode_args_init(&d, sizeof d);
  d.spec = FQ_SPEC;
  d.shape.batch = T_BATCH, d.shape.heads_q = T_HQ, d.shape.heads_kv = T_HKV, d.shape.q_len = 1, d.shape.kv_len = T_N1 + 1;
  d.q.data = DEV(q), d.o.data = DEV(o);
  d.flashq = &fq;
  CHECK_STATUS(qattn_decode(rt, &d, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(o_host, o, 2 * out_elems);
  for (i = 0; i < (int)out_elems; ++i) got[i] = half_to_float(o_host[i]);
  {   /* the prefill's T_N1 tokens of chunk 1, then the appended token (chunk 2's first) */
    const int split[T_BATCH] = {T_N1, T_N1}, lens[T_BATCH] = {T_N1 + 1, T_N1 + 1};
    double *k = malloc(sizeof(double) * T_CACHE_ELEMS), *v = malloc(sizeof(double) * T_CACHE_ELEMS);
    cache_tokens(h, split, k, v);
    reference(h, k, v, 1, lens, ref, ref_lse);
    free(k), free(v);
  }
  m = compare(ref, got, out_elems);
  fprintf(stderr, "   flashq: cos %.6f rel_l2 %.4f max_abs %.4f non-finite %lld\n", m.cosine, m.rel_l2, m.max_abs, m.non_finite);
  CHECK(m.non_finite == 0 && m.cosine >= 0.93 && m.rel_l2 <= 0.35);   /* 4-bit blocks: lossy, a wrong kernel is far off */

  dev_free(kb), dev_free(vb), dev_free(kbuf), dev_free(vbuf), dev_free(heads), dev_free(clens), dev_free(blens);
  dev_free(ks), dev_free(vs), dev_free(k1), dev_free(v1), dev_free(kn), dev_free(vn), dev_free(q), dev_free(o);
  free(ref), free(ref_lse), free(got), free(o_host), free(k_new), free(v_new);
}

/* A one-bucket sweep: both decisions are stored, so the family counts as tuned afterwards. */
void check_tune_decode_gpu(qattn_runtime* rt) {
  const char* spec = "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4";
  const int kv[1] = {1024}, m_rows[1] = {4}, splits[2] = {1, 2};
  const int64_t bh[1] = {8};
  qattn_tune_decode_options t;
  char json[1 << 15] = "";
  size_t needed = 0;
  int tuned = -1;
  CHECK_STATUS(qattn_decode_tuned(rt, spec, &tuned), QATTN_OK, NULL);
  CHECK(tuned == 0);
  qattn_tune_decode_options_init(&t, sizeof t);
  t.kv_lens = kv, t.kv_lens_count = 1;
  t.rows = m_rows, t.rows_count = 1;
  t.batch_heads = bh, t.batch_heads_count = 1;
  t.splits = splits, t.splits_count = 2;
  t.heads_kv = 2;
  CHECK_STATUS(qattn_tune_decode(rt, spec, &t, json, sizeof json, &needed), QATTN_OK, NULL);
  CHECK(needed > 1 && needed <= sizeof json && strlen(json) + 1 == needed);
  CHECK(strstr(json, "\"dataflow\":{") != NULL && strstr(json, "\"splits\":{") != NULL);
  CHECK_STATUS(qattn_decode_tuned(rt, spec, &tuned), QATTN_OK, NULL);
  CHECK(tuned == 1);
}
