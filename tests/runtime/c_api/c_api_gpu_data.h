/* The tokens the GPU part appends and attends to (host fp16 bits), the tokens as a cache of a given
 * format holds them (float64, after the format's rounding), and the float64 reference attention. */
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
#define T_CACHE_ELEMS ((size_t)T_BATCH * T_HKV * T_CAP * T_D)

extern const int start2[T_BATCH];   /* {200, 136}: sequence 1's second append overwrites its tail */
extern const int kv_lens[T_BATCH];  /* start2[b] + T_N2 */

typedef struct host_data {
  uint16_t k1[T_BATCH * T_HKV * T_N1 * T_D], v1[T_BATCH * T_HKV * T_N1 * T_D];
  uint16_t k2[T_BATCH * T_HKV * T_N2 * T_D], v2[T_BATCH * T_HKV * T_N2 * T_D];
  uint16_t q[T_BATCH * T_HQ * T_QMAX * T_D];
} host_data;

/* K with outlier channels (a large bias and spread on every 32nd channel), Q and V standard normal. */
void make_data(host_data* h, uint64_t seed);
/* The unquantized tokens [b][kh][t][c] (T_CACHE_ELEMS each) when the second chunk starts at token
 * split[b]: the first chunk's token t before it, the second chunk's token t - split[b] from it on;
 * tokens past the first chunk that the second does not reach are 0. */
void cache_tokens(const host_data* h, const int* split, double* k, double* v);
/* fp8e4m3:per_head scales of tokens [b][kh][t][c] over tokens [0, tokens): max |x| / 448 per KV head. */
void head_scales(const double* x, int tokens, float* scale);
/* Every row rounded as a cache of `fmt` stores it (kv_layout.h): int8:per_token, int4:per_token,
 * fp8e4m3:per_head (with `scale` per KV head); other formats are left as they are. */
void round_like_cache(const char* fmt, double* x, const float* scale);
/* o [b][hq][q_len][d] and lse [b][hq][q_len] of q (h->q) over keys [0, lens[b]) of k, v (no mask). */
void reference(const host_data* h, const double* k, const double* v, int q_len, const int* lens, double* o,
               double* lse);

#endif /* QATTN_TESTS_C_API_GPU_DATA_H_ */
