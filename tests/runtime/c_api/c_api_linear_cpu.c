/* CPU checks of the linear-layer calls: qattn_linear and qattn_linear_route refuse malformed requests with
 * QATTN_BAD_INPUT and a one-line message saying what is accepted, before any GPU work; the versioned
 * struct's defaults. */
#include <stdint.h>
#include <string.h>

#include "c_api_check.h"

#define LINEAR_SPEC "linear a=fp16 w=int4:per_group out=fp16 n=256 k=1024 arch=sm_90a"

/* Aligned, never dereferenced: the checks fail before any launch. */
#define FAKE(addr) ((void*)(uintptr_t)(addr))

static qattn_linear_args linear_args(void) {
  qattn_linear_args a;
  qattn_linear_args_init(&a, sizeof a);
  a.spec = LINEAR_SPEC;
  a.m = 5;
  a.a = FAKE(0x10000);
  a.w = FAKE(0x20000);
  a.w_scale = (const float*)FAKE(0x30000);
  a.w_zero = (const float*)FAKE(0x40000);
  a.c = FAKE(0x50000);
  return a;
}

void check_linear_validation(qattn_runtime* rt) {
  qattn_linear_args a;
  CHECK(qattn_linear_args_init(&a, sizeof a) == QATTN_OK);
  CHECK(a.struct_size == sizeof a && a.m == 0 && a.splits == 0 && a.tiling == NULL && a.spec == NULL);
  CHECK_STATUS(qattn_linear(rt, NULL, NULL), QATTN_BAD_INPUT, "args is NULL");
  a = linear_args();
  a.struct_size = 16;
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "struct_size 16 is below");
  a = linear_args();
  a.spec = NULL;
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "args.spec is NULL");
  a.spec = "decode qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a";
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "takes a linear spec");
  a.spec = "linear a=fp16 w=int4:per_group out=fp16 n=256 k=1000 arch=sm_90a";
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "a multiple of 128");
  a = linear_args();
  a.m = 0;
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "m >= 1");
  a = linear_args();
  a.w_zero = NULL;
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "weights.zero is null");
  a = linear_args();
  a.c = FAKE(0x50004);
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "not 16-byte aligned");
  a = linear_args();
  a.bias = FAKE(0x60000);
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "spec has no bias");
  a = linear_args();
  a.ldw = 100;
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "weights.ldw=100 bytes");
  a = linear_args();
  a.tiling = "bm8_bn128";
  CHECK_STATUS(qattn_linear(rt, &a, NULL), QATTN_BAD_INPUT, "tiling");
  {
    qattn_linear_plan* plan = (qattn_linear_plan*)FAKE(16);
    a = linear_args();
    CHECK_STATUS(qattn_linear_plan_create(rt, &a, 1u, &plan), QATTN_BAD_INPUT, "unknown flags 1");
    CHECK(plan == NULL);
    CHECK_STATUS(qattn_linear_plan_run(rt, NULL, &a, NULL, NULL), QATTN_BAD_INPUT, "plan is NULL");
    CHECK(strcmp(qattn_linear_plan_kernel_name(NULL), "") == 0);
  }
  a = linear_args();
  a.m = -3;
  CHECK_STATUS(qattn_linear_route(rt, &a, NULL, 0, NULL, 0, NULL), QATTN_BAD_INPUT, "m >= 1");
}
