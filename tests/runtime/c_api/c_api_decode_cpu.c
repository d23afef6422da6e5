/* CPU checks of the decode half of the C API: KV cache sizes against kv_layout.h's formulas, the
 * argument structs' defaults, one-line bad-input errors before any GPU work, compile-only of a decode
 * kernel, FlashQ sizes, and the unified-max calibration (host code). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "c_api_check.h"

#define SPEC(fmt, extra) "decode qk=" fmt " pv=" fmt " out=fp16 d=128 arch=sm_90a" extra

static void check_sizes(void) {
  int64_t bytes = -1;
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("fp16", ""), &bytes), QATTN_OK, NULL);
  CHECK(bytes == 256);   /* 2d */
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("int8:per_token", ""), &bytes), QATTN_OK, NULL);
  CHECK(bytes == 132);   /* 4 + d */
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("int4:per_token", ""), &bytes), QATTN_OK, NULL);
  CHECK(bytes == 68);    /* 4 + d/2 */
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("int4:per_group", ""), &bytes), QATTN_OK, NULL);
  CHECK(bytes == 80);    /* 16 + d/2 */
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("fp8e4m3:per_head", ""), &bytes), QATTN_OK, NULL);
  CHECK(bytes == 128);   /* d */
  CHECK_STATUS(qattn_kv_row_bytes("decode qk=int8:per_token pv=int8:per_token out=fp16 d=64", &bytes), QATTN_OK, NULL);
  CHECK(bytes == 68);
  CHECK_STATUS(qattn_kv_cache_bytes(SPEC("int8:per_token", " paged"), 3, 4, 256, &bytes), QATTN_OK, NULL);
  CHECK(bytes == 3LL * 4 * 256 * 132);

  CHECK_STATUS(qattn_kv_row_bytes(NULL, &bytes), QATTN_BAD_INPUT, "spec is NULL");
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("int8:per_token", ""), NULL), QATTN_BAD_INPUT, "bytes_out is NULL");
  CHECK_STATUS(qattn_kv_row_bytes("prefill qk=fp16 pv=fp16 out=fp16 d=128", &bytes), QATTN_BAD_INPUT, "takes a decode spec");
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("flashq:per_channel", ""), &bytes), QATTN_BAD_INPUT, "flashq caches");
  CHECK_STATUS(qattn_kv_row_bytes(SPEC("int9:per_token", ""), &bytes), QATTN_BAD_INPUT, "accepted");
  CHECK_STATUS(qattn_kv_cache_bytes(SPEC("int8:per_token", ""), 1, 4, 0, &bytes), QATTN_BAD_INPUT, "must be >= 1");

  CHECK_STATUS(qattn_flashq_buffer_bytes(128, 2, 4, &bytes), QATTN_OK, NULL);
  CHECK(bytes == 2LL * 4 * 80 * 132);   /* 80 int8:per_token rows per (sequence, head) */
  CHECK_STATUS(qattn_flashq_buffer_bytes(100, 2, 4, &bytes), QATTN_BAD_INPUT, "64");
  {
    const int mixed[2] = {4, 2}, four[2] = {4, 4}, bad[2] = {4, 3};
    int64_t upper = 0, with_four = 0;
    CHECK_STATUS(qattn_flashq_page_bytes(128, 2, NULL, &upper), QATTN_OK, NULL);
    CHECK_STATUS(qattn_flashq_page_bytes(128, 2, four, &with_four), QATTN_OK, NULL);
    CHECK_STATUS(qattn_flashq_page_bytes(128, 2, mixed, &bytes), QATTN_OK, NULL);
    CHECK(upper == with_four && bytes < upper && bytes > upper / 2);
    /* one head's 64 tokens at 2 bits instead of 4 save 64 * 128 * 2 / 8 bytes */
    CHECK(upper - bytes == 64 * 128 * 2 / 8);
    CHECK_STATUS(qattn_flashq_page_bytes(128, 2, bad, &bytes), QATTN_BAD_INPUT, "2");
    CHECK_STATUS(qattn_flashq_page_bytes(128, 0, NULL, &bytes), QATTN_BAD_INPUT, "heads_kv must be >= 1");
  }
}

static void check_arg_defaults(void) {
  qattn_decode_args d;
  qattn_append_args a;
  qattn_tune_decode_options t;
  qattn_flashq_prefill_args p;
  qattn_cache_prefill_args c;
  memset(&d, 0x7f, sizeof d);
  memset(&a, 0x7f, sizeof a);
  memset(&c, 0x7f, sizeof c);
  CHECK_STATUS(qattn_decode_args_init(&d, sizeof d), QATTN_OK, NULL);
  CHECK(d.struct_size == sizeof d && d.spec == NULL && d.splits == 0 && d.lse == NULL && d.tiling == NULL);
  CHECK(d.unified_max.phi == 0.f && d.unified_max.lo == -9.f && d.unified_max.hi == 8.f && d.unified_max.enabled == 1);
  CHECK(d.cache.k == NULL && d.cache.capacity == 0 && d.flashq == NULL && d.softmax_scale == 0.f);
  CHECK_STATUS(qattn_append_args_init(&a, sizeof a), QATTN_OK, NULL);
  CHECK(a.batch == 1 && a.heads_kv == 1 && a.n_new == 1 && a.start == NULL);
  CHECK(a.k_mean == NULL && a.init_k_mean == 0 && d.k_mean == NULL);
  /* A caller built before K smoothing passes the older size: the fields after it are not written. */
  memset(&a, 0x7f, sizeof a);
  CHECK_STATUS(qattn_append_args_init(&a, offsetof(qattn_append_args, k_mean)), QATTN_OK, NULL);
  CHECK(a.n_new == 1 && a.init_k_mean == 0x7f7f7f7f);
  CHECK_STATUS(qattn_cache_prefill_args_init(&c, sizeof c), QATTN_OK, NULL);
  CHECK(c.struct_size == sizeof c && c.spec == NULL && c.cache_spec == NULL && c.k_mean == NULL && c.lse == NULL);
  CHECK(c.cache.k == NULL && c.softmax_scale == 0.f);
  CHECK_STATUS(qattn_cache_prefill_args_init(&c, 12), QATTN_BAD_INPUT, "struct_size 12");
  CHECK_STATUS(qattn_tune_decode_options_init(&t, sizeof t), QATTN_OK, NULL);
  CHECK(t.heads_kv == 8 && t.min_split_tokens == 256 && t.q_len == 1 && fabs(t.tolerance - 0.03) < 1e-12);
  CHECK(t.kv_lens == NULL && t.kv_lens_count == 0);
  CHECK_STATUS(qattn_flashq_prefill_args_init(&p, sizeof p), QATTN_OK, NULL);
  CHECK(p.n_low == -1 && p.lens == NULL && p.cache == NULL);
  CHECK_STATUS(qattn_decode_args_init(&d, 12), QATTN_BAD_INPUT, "struct_size 12");
  CHECK_STATUS(qattn_decode_args_init(NULL, sizeof d), QATTN_BAD_INPUT, "args is NULL");
}

void check_decode_validation(qattn_runtime* rt);
void check_linear_validation(qattn_runtime* rt);
void check_calibration(void);

void check_decode_cpu(qattn_runtime* rt) {
  check_sizes();
  check_arg_defaults();
  check_decode_validation(rt);
  check_linear_validation(rt);
  check_calibration();
}
