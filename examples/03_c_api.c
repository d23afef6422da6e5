/* The C API: compile a kernel into the cache (no GPU needed), then report what a GPU run would need. */
#include <stdio.h>

#include "qattn/qattn.h"

int main(void) {
  qattn_runtime* rt = NULL;
  qattn_runtime_options opt = qattn_default_options();
  if (qattn_runtime_create(&opt, &rt) != QATTN_OK) {
    fprintf(stderr, "qattn: %s\n", qattn_last_error());
    return 1;
  }
  char name[256];
  qattn_status st = qattn_compile(rt, "prefill qk=int8:per_block pv=int8:per_tensor out=bf16 d=64 arch=sm_89", NULL,
                                  name, sizeof name);
  if (st == QATTN_OK) printf("compiled %s (qattn %s)\n", name, qattn_version());
  else fprintf(stderr, "qattn: %s\n", qattn_last_error());
  /* A bad spec gives QATTN_BAD_INPUT and says what is accepted. */
  if (qattn_compile(rt, "prefill qk=int9:per_token pv=fp16 out=fp16 d=128 arch=sm_90a", NULL, NULL, 0) == QATTN_BAD_INPUT)
    printf("bad spec rejected: %s\n", qattn_last_error());
  qattn_runtime_destroy(rt);
  return st;
}
