/* The CPU part of the C API test program: everything that needs no GPU. */
#define _POSIX_C_SOURCE 200809L   /* mkdtemp, unlink, rmdir */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_api_check.h"

void check_options(const char* dir);
void check_decode_cpu(qattn_runtime* rt);
void check_varlen_cpu(qattn_runtime* rt);
void check_plan_cpu(qattn_runtime* rt);

void run_cpu_checks(void) {
  char dir[] = "/tmp/qattn_c_api_XXXXXX";
  char path[600];
  if (!mkdtemp(dir)) {
    fprintf(stderr, "cannot create a temporary directory\n");
    ++g_failures;
    return;
  }
  check_options(dir);
  {
    qattn_options o;
    qattn_runtime* rt = NULL;
    qattn_options_init(&o, sizeof o);
    o.use_cache = 0;
    CHECK_STATUS(qattn_runtime_open(&o, &rt), QATTN_OK, NULL);
    if (rt) check_decode_cpu(rt);
    if (rt) check_varlen_cpu(rt);
    if (rt) check_plan_cpu(rt);
    qattn_runtime_destroy(rt);
  }
  snprintf(path, sizeof path, "%s/c_api_user.db", dir);
  unlink(path);
  rmdir(dir);
}
