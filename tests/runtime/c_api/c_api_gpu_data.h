/* The tokens the GPU part appends and attends to, on the host (fp16 bits) and the float64 reference. */
#ifndef QATTN_TESTS_C_API_GPU_DATA_H_
#define QATTN_TESTS_C_API_GPU_DATA_H_

#include "c_api_host.h"

#define T_BATCH 2
#define T_HKV 2
#define T_GQA 4
#define T_HQ (T_HKV * T_GQA)
#define T_D 128
#define T_QMAX 2
#define T_N1 200   /* first append: tokens [0, 200) of every sequence */
#define T_N2 136   /* second append: from start2[b] */
#define T_CAP 336  /* tokens per sequence (a multiple of 4 and of the page size 16) */

extern const int start2[T_BATCH];   /* {200, 136}: sequence 1's second append overwrites its tail */
extern const int kv_lens[T_BATCH];  /* start2[b] + T_N2 */

typedef struct host_data {
  uint16_t k1[T_BATCH * T_HKV * T_N1 * T_D], v1[T_BATCH * T_HKV * T_N1 * T_D];
  uint16_t k2[T_BATCH * T_HKV * T_N2 * T_D], v2[T_BATCH * T_HKV * T_N2 * T_D];
  uint16_t q[T_BATCH * T_HQ * T_QMAX * T_D];
} host_data;

/* K with outlier channels (a large bias and spread on every 32nd channel), Q and V standard normal. */
void make_data(host_data* h, uint64_t seed);
/* Token t of sequence b, KV head kh, channel c when the second chunk starts at token split[b]: the
first chunk's token t before it, the second chunk's token t - split[b] from it on. */
double token_k(const host_data* h, const int* split, int b, int kh, int t, int c);
double token_v(const host_data* h, const int* split, int b, int kh, int t, int c);
/* o [b][hq][q_len][d] and lse [b][hq][q_len] over keys [0, lens[b]) (no mask among the new tokens). */
void reference(const host_data* h, const int* split, int q_len, const int* lens, double* o, double* lse);

#endif /* QATTN_TESTS_C_API_GPU_DATA_H_ */
