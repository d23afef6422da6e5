/* The C API from an installed qattn: the version, a compile-only request (NVRTC, no GPU, no cache
 * file) and a malformed spec refused with QATTN_BAD_INPUT. Prints one line per step; exits non-zero on
 * the first step that does not behave. */
#include <stdio.h>
#include <string.h>

#include "qattn/qattn.h"

int main(void) {
  printf("version: %s\n", qattn_version());
  qattn_runtime_options options = qattn_default_options();
  options.use_cache = 0;
  qattn_runtime* rt = NULL;
  if (qattn_runtime_create(&options, &rt) != QATTN_OK) {
    fprintf(stderr, "create: %s\n", qattn_last_error());
    return 1;
  }
  char name[256] = "";
  if (qattn_compile(rt, "prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80", NULL, name, sizeof name) != QATTN_OK) {
    fprintf(stderr, "compile: %s\n", qattn_last_error());
    qattn_runtime_destroy(rt);
    return 1;
  }
  printf("compiled: %s\n", name);
  qattn_status bad = qattn_compile(rt, "prefill qk=int9 pv=fp16 out=fp16 d=64 arch=sm_80", NULL, NULL, 0);
  if (bad == QATTN_BAD_INPUT) printf("refused: %s\n", qattn_last_error());
  else fprintf(stderr, "a bad spec gave status %d, expected QATTN_BAD_INPUT\n", (int)bad);
  qattn_runtime_destroy(rt);
  return bad == QATTN_BAD_INPUT ? 0 : 1;
}
