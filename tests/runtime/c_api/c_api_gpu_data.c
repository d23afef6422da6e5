/* The GPU part's tokens, their rounding by the cache formats, and the float64 reference
 * (see c_api_gpu_data.h). */
#include "c_api_gpu_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void cache_tokens(const host_data* h, const int* split, double* k, double* v) {
  int b, kh, t, c;
  memset(k, 0, sizeof(double) * T_CACHE_ELEMS);
  memset(v, 0, sizeof(double) * T_CACHE_ELEMS);
  for (b = 0; b < T_BATCH; ++b)
    for (kh = 0; kh < T_HKV; ++kh)
      for (t = 0; t < T_CAP; ++t) {
        const size_t row = (((size_t)b * T_HKV + kh) * T_CAP + t) * T_D;
        const uint16_t *ks = NULL, *vs = NULL;
        if (t < split[b] && t < T_N1) {
          ks = h->k1 + (((size_t)b * T_HKV + kh) * T_N1 + t) * T_D;
          vs = h->v1 + (((size_t)b * T_HKV + kh) * T_N1 + t) * T_D;
        } else if (t >= split[b] && t - split[b] < T_N2) {
          ks = h->k2 + (((size_t)b * T_HKV + kh) * T_N2 + (t - split[b])) * T_D;
          vs = h->v2 + (((size_t)b * T_HKV + kh) * T_N2 + (t - split[b])) * T_D;
        }
        if (!ks) continue;
        for (c = 0; c < T_D; ++c) {
          k[row + c] = half_to_float(ks[c]);
          v[row + c] = half_to_float(vs[c]);
        }
      }
}

void head_scales(const double* x, int tokens, float* scale) {
  int b, kh, t, c;
  for (kh = 0; kh < T_HKV; ++kh) {
    double m = 0;
    for (b = 0; b < T_BATCH; ++b)
      for (t = 0; t < tokens; ++t)
        for (c = 0; c < T_D; ++c) m = fmax(m, fabs(x[(((size_t)b * T_HKV + kh) * T_CAP + t) * T_D + c]));
    scale[kh] = (float)(m / 448.0);
  }
}

/* OCP e4m3: 3 mantissa bits, normals down to 2^-6, subnormal steps of 2^-9, largest 448; nearest even. */
static double round_e4m3(double y) {
  const double a = fabs(y);
  double step, r;
  int e;
  if (a == 0) return 0;
  frexp(a, &e);   /* a in [2^(e-1), 2^e) */
  step = ldexp(1.0, (e - 1 < -6 ? -6 : e - 1) - 3);
  r = nearbyint(a / step) * step;
  if (r > 448) r = 448;
  return y < 0 ? -r : r;
}

static void round_row(const char* fmt, double* x, float head_scale) {
  double lo = x[0], hi = x[0], absmax = 0;
  int c;
  for (c = 0; c < T_D; ++c) {
    lo = fmin(lo, x[c]), hi = fmax(hi, x[c]);
    absmax = fmax(absmax, fabs(x[c]));
  }
  if (strcmp(fmt, "int8:per_token") == 0) {
    const float scale = (float)(absmax / 127.0);
    for (c = 0; c < T_D; ++c) {
      const double q = absmax > 0 ? fmax(-127, fmin(127, nearbyint(x[c] * (127.0 / absmax)))) : 0;
      x[c] = scale * q;
    }
  } else if (strcmp(fmt, "int4:per_token") == 0) {
    const double scale = half_to_float(float_to_half((float)((hi - lo) / 15.0)));
    const double shift = half_to_float(float_to_half((float)lo));
    for (c = 0; c < T_D; ++c) {
      const double q = scale > 0 ? fmax(0, fmin(15, nearbyint((x[c] - shift) * (1.0 / scale)))) : 0;
      x[c] = q * scale + shift;
    }
  } else if (strcmp(fmt, "fp8e4m3:per_head") == 0) {
    for (c = 0; c < T_D; ++c) x[c] = head_scale > 0 ? head_scale * round_e4m3(x[c] / head_scale) : 0;
  }
}

void round_like_cache(const char* fmt, double* x, const float* scale) {
  size_t row;
  for (row = 0; row < T_CACHE_ELEMS / T_D; ++row)
    round_row(fmt, x + row * T_D, scale ? scale[row / T_CAP % T_HKV] : 0.f);
}

void reference(const host_data* h, const double* k, const double* v, int q_len, const int* lens, double* o,
               double* lse) {
  const double scale = 1.0 / sqrt((double)T_D);
  double* s = malloc(sizeof(double) * T_CAP);
  int b, hq, i, t, c;
  for (b = 0; b < T_BATCH; ++b)
    for (hq = 0; hq < T_HQ; ++hq)
      for (i = 0; i < q_len; ++i) {
        const size_t row = ((size_t)b * T_HQ + hq) * q_len + i;
        const size_t head = ((size_t)b * T_HKV + hq / T_GQA) * T_CAP * T_D;
        const uint16_t* q = h->q + row * T_D;
        double m = -INFINITY, sum = 0;
        for (t = 0; t < lens[b]; ++t) {
          double dot = 0;
          for (c = 0; c < T_D; ++c) dot += half_to_float(q[c]) * k[head + (size_t)t * T_D + c];
          s[t] = scale * dot;
          if (s[t] > m) m = s[t];
        }
        for (t = 0; t < lens[b]; ++t) sum += (s[t] = exp(s[t] - m));
        for (c = 0; c < T_D; ++c) {
          double acc = 0;
          for (t = 0; t < lens[b]; ++t) acc += s[t] * v[head + (size_t)t * T_D + c];
          o[row * T_D + c] = acc / sum;
        }
        lse[row] = m + log(sum);
      }
  free(s);
}
