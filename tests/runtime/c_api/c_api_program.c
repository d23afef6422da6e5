/* The C API driven from a C program: `c_api_program cpu` checks what needs no GPU (options versioning,
 * argument validation and its messages, KV cache sizes, compile-only), `c_api_program gpu` appends to
 * and decodes over KV caches on the GPU against a float64 reference and runs variable-length prefill
 * against per-sequence calls (exit C_API_SKIP without a GPU). */
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"

int g_failures = 0;

void check_status_(qattn_status got, qattn_status want, const char* needle, const char* expr, const char* file, int line) {
  const char* message = qattn_last_error();
  if (got != want) {
    fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", file, line, expr, (int)got, (int)want, message);
    ++g_failures;
    return;
  }
  if (needle && !strstr(message, needle)) {
    fprintf(stderr, "%s:%d: %s: message '%s' lacks '%s'\n", file, line, expr, message, needle);
    ++g_failures;
  }
  if (want == QATTN_BAD_INPUT && strchr(message, '\n')) {
    fprintf(stderr, "%s:%d: %s: the message is not one line: '%s'\n", file, line, expr, message);
    ++g_failures;
  }
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "cpu") != 0 && strcmp(argv[1], "gpu") != 0)) {
    fprintf(stderr, "usage: %s cpu|gpu\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "cpu") == 0) {
    run_cpu_checks();
  } else {
    if (run_gpu_checks() == C_API_SKIP) return C_API_SKIP;
  }
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
