/* GPU part, linear layers through the C API: an int8-weight layer (packed here by the format's rule) at
 * m = 3 and 70 against a float64 reference, then a plan (with the caller's workspace and split-K) giving
 * qattn_linear's bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"
#include "c_api_host.h"

#define L_N 300
#define L_K 512
#define L_MMAX 70

static void check_linear_m(qattn_runtime* rt, int m, const uint16_t* a_bits, const double* a, const int8_t* codes,
                           const float* scale, devptr da, devptr dw, devptr dscale, devptr dc) {
  static double ref[L_MMAX * L_N], got[L_MMAX * L_N];
  static uint16_t c_bits[L_MMAX * L_N];
  qattn_linear_args args;
  char name[200], flow[16];
  int splits = 0, i, j, kk;
  metrics e;
  (void)a_bits;
  qattn_linear_args_init(&args, sizeof args);
  args.spec = "linear a=fp16 w=int8:per_channel out=fp16 n=300 k=512";
  args.m = m;
  args.a = DEV(da), args.w = DEV(dw), args.w_scale = (const float*)DEV(dscale), args.c = DEV(dc);
  dev_fill(dc, 0xff, sizeof c_bits);
  CHECK_STATUS(qattn_linear_route(rt, &args, name, sizeof name, flow, sizeof flow, &splits), QATTN_OK, NULL);
  CHECK_STATUS(qattn_linear(rt, &args, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(c_bits, dc, sizeof(uint16_t) * (size_t)m * L_N);
  for (i = 0; i < m; ++i)
    for (j = 0; j < L_N; ++j) {
      double s = 0;
      for (kk = 0; kk < L_K; ++kk) s += a[i * L_K + kk] * codes[j * L_K + kk] * (double)scale[j];
      ref[i * L_N + j] = s;
      got[i * L_N + j] = half_to_float(c_bits[i * L_N + j]);
    }
  e = compare(ref, got, (size_t)m * L_N);
  printf("linear m=%d %s (%s, %d splits): cos %.6f relL2 %.2e maxabs %.2e\n", m, name, flow, splits, e.cosine, e.rel_l2,
         e.max_abs);
  CHECK(e.non_finite == 0);
  CHECK(e.rel_l2 < 1.5e-3);
}

void check_linear_gpu(qattn_runtime* rt) {
  static uint16_t a_bits[L_MMAX * L_K], eager[L_MMAX * L_N], planned[L_MMAX * L_N];
  static double a[L_MMAX * L_K];
  static int8_t codes[L_N * L_K];
  static float w[L_N * L_K], scale[L_N];
  uint64_t state = 77;
  int i, j;
  devptr da = dev_alloc(sizeof a_bits), dw = dev_alloc(sizeof codes), dscale = dev_alloc(sizeof scale),
         dc = dev_alloc(sizeof eager), ws = 0;
  qattn_linear_args args;
  qattn_linear_plan* plan = NULL;
  int64_t ws_bytes = 0;
  for (i = 0; i < L_MMAX * L_K; ++i) {
    a_bits[i] = float_to_half((float)(next_normal(&state) * (i % 97 == 5 ? 20.0 : 1.0)));   /* outlier channels */
    a[i] = half_to_float(a_bits[i]);
  }
  for (j = 0; j < L_N; ++j) {   /* int8 per output channel: scale = max |w| / 127, code = round(w / scale) */
    float amax = 0;
    for (i = 0; i < L_K; ++i) {
      w[j * L_K + i] = (float)(0.02 * next_normal(&state));
      if (fabsf(w[j * L_K + i]) > amax) amax = fabsf(w[j * L_K + i]);
    }
    scale[j] = amax / 127.0f;
    for (i = 0; i < L_K; ++i) codes[j * L_K + i] = (int8_t)lrintf(w[j * L_K + i] / scale[j]);
  }
  dev_upload(da, a_bits, sizeof a_bits);
  dev_upload(dw, codes, sizeof codes);
  dev_upload(dscale, scale, sizeof scale);
  check_linear_m(rt, 3, a_bits, a, codes, scale, da, dw, dscale, dc);
  check_linear_m(rt, L_MMAX, a_bits, a, codes, scale, da, dw, dscale, dc);

  /* A plan with split-K and the caller's zeroed workspace: qattn_linear's bits. */
  qattn_linear_args_init(&args, sizeof args);
  args.spec = "linear a=fp16 w=int8:per_channel out=fp16 n=300 k=512 flow=flat";
  args.m = 9;
  args.splits = 2;
  CHECK_STATUS(qattn_linear_plan_create(rt, &args, QATTN_PLAN_CALLER_WORKSPACE, &plan), QATTN_OK, NULL);
  if (!plan) return;
  CHECK_STATUS(qattn_linear_plan_workspace_bytes(plan, &ws_bytes), QATTN_OK, NULL);
  CHECK(ws_bytes > 0);
  ws = dev_alloc((size_t)ws_bytes);
  dev_fill(ws, 0, (size_t)ws_bytes);
  args.a = DEV(da), args.w = DEV(dw), args.w_scale = (const float*)DEV(dscale), args.c = DEV(dc);
  CHECK_STATUS(qattn_linear_plan_run(rt, plan, &args, NULL, NULL), QATTN_BAD_INPUT, "workspace");
  CHECK_STATUS(qattn_linear_plan_run(rt, plan, &args, DEV(ws), NULL), QATTN_OK, NULL);
  CHECK_STATUS(qattn_linear_plan_run(rt, plan, &args, DEV(ws), NULL), QATTN_OK, NULL);   /* counters came back to 0 */
  dev_sync();
  dev_download(planned, dc, sizeof(uint16_t) * 9 * L_N);
  CHECK_STATUS(qattn_linear(rt, &args, NULL), QATTN_OK, NULL);
  dev_sync();
  dev_download(eager, dc, sizeof(uint16_t) * 9 * L_N);
  CHECK(memcmp(planned, eager, sizeof(uint16_t) * 9 * L_N) == 0);
  printf("linear plan %s: %s\n", qattn_linear_plan_kernel_name(plan),
         memcmp(planned, eager, sizeof(uint16_t) * 9 * L_N) == 0 ? "same bits as qattn_linear" : "DIFFERS");
  qattn_linear_plan_destroy(plan);
  dev_free(ws), dev_free(da), dev_free(dw), dev_free(dscale), dev_free(dc);
}
