/* The C API test program's shared pieces (written in C99, compiled as C). */
#ifndef QATTN_TESTS_C_API_CHECK_H_
#define QATTN_TESTS_C_API_CHECK_H_

#include <stdio.h>

#include "qattn/qattn.h"

/* ctest's SKIP_RETURN_CODE for the GPU part on a machine without a CUDA driver or device. */
#define C_API_SKIP 77

extern int g_failures;

/* Records a failure with its place; the program's exit code is 1 when any check failed. */
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
      ++g_failures;                                                                  \
    }                                                                                \
  } while (0)

/* The call returns `status` and its message contains `needle` (NULL: any message). */
#define CHECK_STATUS(call, status, needle) check_status_((call), (status), (needle), #call, __FILE__, __LINE__)
void check_status_(qattn_status got, qattn_status want, const char* needle, const char* expr, const char* file, int line);

/* The CPU part (no GPU needed) and the GPU part (C_API_SKIP without a GPU). */
void run_cpu_checks(void);
int run_gpu_checks(void);

#endif /* QATTN_TESTS_C_API_CHECK_H_ */
