/* CPU checks of the variable-length prefill call (qattn_attention_varlen): the refusals that come before
 * the runtime asks the device for its arch, each with its one-line message. A well-formed call's shape
 * checks (q_len, heads, gqa) and its output alignment come after that question (Runtime::resolve), so
 * they need a GPU and are not reachable here; the GPU part runs varlen calls for real. */
#include <stdint.h>

#include "c_api_check.h"

#define PREFILL "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal arch=sm_90a"
#define DECODE "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 arch=sm_90a"

/* Aligned, never dereferenced: every call below is refused before any launch. */
#define FAKE(addr) ((void*)(uintptr_t)(addr))

void check_varlen_cpu(qattn_runtime* rt) {
  const qattn_shape shape = {3, 8, 2, 130, 130};
  const qattn_tensor q = {FAKE(0x10000), 0, 128, 8 * 128};
  const qattn_tensor kv = {FAKE(0x20000), 0, 128, 2 * 128};
  const qattn_tensor o = {FAKE(0x30000), 0, 128, 8 * 128};
  const int* cu_q = (const int*)FAKE(0x40000);
  const int* cu_kv = (const int*)FAKE(0x50000);
  qattn_prepared* prepared = FAKE(0x1);

  CHECK_STATUS(qattn_attention_varlen(NULL, PREFILL, shape, q, kv, kv, o, cu_q, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "runtime is NULL");
  CHECK_STATUS(qattn_attention_varlen(rt, PREFILL, shape, q, kv, kv, o, NULL, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "cu_seqlens_q is NULL");
  CHECK_STATUS(qattn_attention_varlen(rt, PREFILL, shape, q, kv, kv, o, cu_q, NULL, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "cu_seqlens_kv is NULL");
  CHECK_STATUS(qattn_attention_varlen(rt, PREFILL, shape, q, kv, kv, o, NULL, NULL, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "cu_seqlens_q is NULL");
  CHECK_STATUS(qattn_attention_varlen(rt, NULL, shape, q, kv, kv, o, cu_q, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "spec is NULL");
  CHECK_STATUS(qattn_attention_varlen(rt, "prefill qk=int9:per_token pv=fp16 out=fp16 d=128 arch=sm_90a", shape,
                                      q, kv, kv, o, cu_q, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "int9");

  /* Decode specs take each sequence's cache length in qattn_decode_args.kv_lens; the spec gets
   * `varlen` from the call whether or not its text says it, and decode refuses it. */
  CHECK_STATUS(qattn_attention_varlen(rt, DECODE, shape, q, kv, kv, o, cu_q, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "varlen applies to prefill");
  CHECK_STATUS(qattn_attention_varlen(rt, DECODE " varlen", shape, q, kv, kv, o, cu_q, cu_kv, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "kv_lens");

  /* A spec that says varlen needs the offsets, which only qattn_attention_varlen passes. */
  CHECK_STATUS(qattn_attention(rt, PREFILL " varlen", shape, q, kv, kv, o, 0.f, NULL, NULL), QATTN_BAD_INPUT,
               "pass cu_seqlens_q and cu_seqlens_kv");
  CHECK_STATUS(qattn_prepare(rt, PREFILL " varlen", shape, q, kv, kv, NULL, &prepared), QATTN_BAD_INPUT,
               "is varlen");
  CHECK(prepared == NULL);
}

/* The plan calls' refusals that need no device: arguments, flags, a null plan. */
void check_plan_cpu(qattn_runtime* rt) {
  const qattn_shape shape = {1, 8, 2, 130, 130};
  const qattn_tensor q = {NULL, 130 * 8 * 128, 128, 8 * 128};
  const qattn_tensor kv = {NULL, 130 * 2 * 128, 128, 2 * 128};
  qattn_attention_plan* plan = FAKE(0x1);
  int64_t bytes = -1;

  CHECK_STATUS(qattn_attention_plan_create(NULL, PREFILL, shape, q, kv, kv, q, 0, &plan), QATTN_BAD_INPUT,
               "runtime is NULL");
  CHECK(plan == FAKE(0x1));
  CHECK_STATUS(qattn_attention_plan_create(rt, PREFILL, shape, q, kv, kv, q, 0, NULL), QATTN_BAD_INPUT, "out is NULL");
  CHECK_STATUS(qattn_attention_plan_create(rt, PREFILL, shape, q, kv, kv, q, 8u, &plan), QATTN_BAD_INPUT,
               "unknown flags 8; accepted: QATTN_PLAN_VARLEN (1), QATTN_PLAN_CALLER_WORKSPACE (2)");
  CHECK(plan == NULL);
  CHECK_STATUS(qattn_attention_plan_create(rt, NULL, shape, q, kv, kv, q, 0, &plan), QATTN_BAD_INPUT, "spec is NULL");
  CHECK_STATUS(qattn_attention_plan_create(rt, DECODE, shape, q, kv, kv, q, 0, &plan), QATTN_BAD_INPUT,
               "takes prefill specs");
  CHECK_STATUS(qattn_attention_plan_workspace_bytes(NULL, &bytes), QATTN_BAD_INPUT, "plan is NULL");
  CHECK(bytes == -1);
  CHECK_STATUS(qattn_attention_plan_run(rt, NULL, FAKE(0x10000), FAKE(0x10000), FAKE(0x10000), FAKE(0x10000), NULL, NULL,
                                        NULL, 0.f, NULL, NULL),
               QATTN_BAD_INPUT, "plan is NULL");
  CHECK(qattn_attention_plan_kernel_name(NULL)[0] == '\0');
  qattn_attention_plan_destroy(NULL);
}
