/* The GPU part's tokens and float64 reference (see c_api_gpu_data.h). */
#include "c_api_gpu_data.h"

#include <math.h>
#include <stdlib.h>

const int start2[T_BATCH] = {200, 136};
const int kv_lens[T_BATCH] = {336, 272};

static void fill(uint16_t* x, size_t n, int with_outliers, uint64_t* state) {
  size_t i;
  for (i = 0; i < n; ++i) {
    double value = next_normal(state);
    if (with_outliers && i % T_D % 32 == 5) value = 6.0 + 3.0 * value;
    x[i] = float_to_half((float)value);
  }
}

void make_data(host_data* h, uint64_t seed) {
  uint64_t state = seed;
  fill(h->k1, sizeof h->k1 / 2, 1, &state);
  fill(h->k2, sizeof h->k2 / 2, 1, &state);
  fill(h->v1, sizeof h->v1 / 2, 0, &state);
  fill(h->v2, sizeof h->v2 / 2, 0, &state);
  fill(h->q, sizeof h->q / 2, 0, &state);
}

static double token(const uint16_t* first, const uint16_t* second, const int* split, int b, int kh, int t, int c) {
  if (t < split[b]) return half_to_float(first[(((size_t)b * T_HKV + kh) * T_N1 + t) * T_D + c]);
  return half_to_float(second[(((size_t)b * T_HKV + kh) * T_N2 + (t - split[b])) * T_D + c]);
}

double token_k(const host_data* h, const int* split, int b, int kh, int t, int c) {
  return token(h->k1, h->k2, split, b, kh, t, c);
}
double token_v(const host_data* h, const int* split, int b, int kh, int t, int c) {
  return token(h->v1, h->v2, split, b, kh, t, c);
}

void reference(const host_data* h, const int* split, int q_len, const int* lens, double* o, double* lse) {
  const double scale = 1.0 / sqrt((double)T_D);
  double* s = malloc(sizeof(double) * T_CAP);
  int b, hq, i, t, c;
  for (b = 0; b < T_BATCH; ++b)
    for (hq = 0; hq < T_HQ; ++hq)
      for (i = 0; i < q_len; ++i) {
        const int kh = hq / T_GQA;
        const size_t row = ((size_t)b * T_HQ + hq) * q_len + i;
        const uint16_t* q = h->q + row * T_D;
        double m = -INFINITY, sum = 0;
        for (t = 0; t < lens[b]; ++t) {
          double dot = 0;
          for (c = 0; c < T_D; ++c) dot += half_to_float(q[c]) * token_k(h, split, b, kh, t, c);
          s[t] = scale * dot;
          if (s[t] > m) m = s[t];
        }
        for (t = 0; t < lens[b]; ++t) sum += (s[t] = exp(s[t] - m));
        for (c = 0; c < T_D; ++c) {
          double acc = 0;
          for (t = 0; t < lens[b]; ++t) acc += s[t] * token_v(h, split, b, kh, t, c);
          o[row * T_D + c] = acc / sum;
        }
        lse[row] = m + log(sum);
      }
  free(s);
}
