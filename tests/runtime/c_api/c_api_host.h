/* Host helpers of the C API test program's GPU part: the CUDA driver (loaded with dlopen, so that the
 * program runs on machines without one), fp16 conversions, random data and the float64 reference. */
#ifndef QATTN_TESTS_C_API_HOST_H_
#define QATTN_TESTS_C_API_HOST_H_

#include <stddef.h>
#include <stdint.h>

typedef unsigned long long devptr;

/* 0 when a driver and device 0 are usable (its primary context made current), else -1 with `why`. */
int cuda_open(char* why, size_t why_len);
devptr dev_alloc(size_t bytes);                 /* 0 on failure (a failed CHECK) */
void dev_free(devptr p);
void dev_upload(devptr dst, const void* src, size_t bytes);
void dev_download(void* dst, devptr src, size_t bytes);
void dev_fill(devptr dst, unsigned char byte, size_t bytes);
void dev_sync(void);
#define DEV(p) ((void*)(uintptr_t)(p))

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

/* Deterministic standard normal samples. */
double next_normal(uint64_t* state);

/* Output quality against the float64 reference. */
typedef struct metrics {
  double cosine, rel_l2, max_abs;
  long long non_finite;
} metrics;
metrics compare(const double* ref, const double* got, size_t n);

#endif /* QATTN_TESTS_C_API_HOST_H_ */
