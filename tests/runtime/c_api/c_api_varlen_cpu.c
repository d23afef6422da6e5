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
