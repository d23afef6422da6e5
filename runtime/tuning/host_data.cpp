#include "runtime/tuning/host_data.hpp"

#include <cmath>
#include <cstring>

namespace qattn::rt {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);   // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                                // subnormal half (or zero)
    const float a = std::fabs(f) * 16777216.0f;                         // units of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  const uint32_t mant = abs & 0x7fffffu;
  uint32_t h = ((abs >> 23) - 112u) << 10 | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(static_cast<float>(m), -24);
    return sign ? -f : f;
  }
  const uint32_t x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t to_bits(Fmt fmt, float f) { return fmt == Fmt::bf16 ? float_to_bf16(f) : float_to_half(f); }
float from_bits(Fmt fmt, uint16_t h) { return fmt == Fmt::bf16 ? bf16_to_float(h) : half_to_float(h); }

std::vector<float> random_activations(std::mt19937_64& rng, long long rows, int d, int biased_channels,
                                      int scaled_channels) {
  std::normal_distribution<float> n01(0.f, 1.f);
  std::uniform_real_distribution<float> bias(5.f, 20.f);
  std::vector<float> offset(static_cast<size_t>(d), 0.f), gain(static_cast<size_t>(d), 1.f);
  for (int i = 0; i < biased_channels; ++i) offset[static_cast<size_t>(rng() % d)] = (rng() & 1 ? 1 : -1) * bias(rng);
  for (int i = 0; i < scaled_channels; ++i) gain[static_cast<size_t>(rng() % d)] = 10.f;
  std::vector<float> x(static_cast<size_t>(rows) * d);
  for (long long r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c) x[static_cast<size_t>(r * d + c)] = n01(rng) * gain[c] + offset[c];
  return x;
}

std::vector<RowId> sample_rows(const Problem& p, int max_heads, int max_rows) {
  // The first and last (batch, head) and evenly spread ones between; rows spread over q_len, always
  // including the first and the last (the causal edge cases).
  const long long heads = static_cast<long long>(p.batch) * p.heads_q;
  const int nh = static_cast<int>(std::min<long long>(heads, max_heads));
  const int nr = std::min(p.q_len, max_rows);
  std::vector<RowId> rows;
  for (int a = 0; a < nh; ++a) {
    const long long bh = nh == 1 ? 0 : a * (heads - 1) / (nh - 1);
    for (int r = 0; r < nr; ++r) {
      const int i = nr == 1 ? 0 : static_cast<int>(static_cast<long long>(r) * (p.q_len - 1) / (nr - 1));
      rows.push_back({static_cast<int>(bh / p.heads_q), static_cast<int>(bh % p.heads_q), i});
    }
  }
  return rows;
}

std::vector<double> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const Problem& p, int d, bool causal,
                                        double scale, const std::vector<RowId>& rows) {
  std::vector<double> out(rows.size() * static_cast<size_t>(d), 0.0);
  std::vector<double> s(static_cast<size_t>(p.kv_len));
  const int group = p.heads_q / p.heads_kv;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowId& row = rows[r];
    const size_t qrow = ((static_cast<size_t>(row.b) * p.heads_q + row.h) * p.q_len + row.i) * d;
    const size_t kbase = (static_cast<size_t>(row.b) * p.heads_kv + row.h / group) * p.kv_len * d;
    const long long last = causal ? static_cast<long long>(row.i) + p.kv_len - p.q_len : p.kv_len - 1;
    if (last < 0) continue;   // no visible key: the output row is zero
    double m = -INFINITY;
    for (long long j = 0; j <= last && j < p.kv_len; ++j) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += static_cast<double>(q[qrow + c]) * k[kbase + j * d + c];
      s[j] = acc * scale;
      m = std::max(m, s[j]);
    }
    double l = 0;
    for (long long j = 0; j <= last && j < p.kv_len; ++j) l += (s[j] = std::exp(s[j] - m));
    double* o = &out[r * d];
    for (long long j = 0; j <= last && j < p.kv_len; ++j)
      for (int c = 0; c < d; ++c) o[c] += s[j] / l * v[kbase + j * d + c];
  }
  return out;
}

Agreement compare(const std::vector<float>& got, const std::vector<double>& want) {
  Agreement a;
  double dot = 0, gg = 0, ww = 0, diff = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++a.non_finite;
      continue;
    }
    const double g = got[i], w = want[i];
    dot += g * w;
    gg += g * g;
    ww += w * w;
    diff += (g - w) * (g - w);
    a.max_abs = std::max(a.max_abs, std::fabs(g - w));
  }
  a.cosine = gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
  a.rel_l2 = ww > 0 ? std::sqrt(diff / ww) : std::sqrt(diff);
  if (got.size() != want.size()) a.non_finite += 1;
  return a;
}

}  // namespace qattn::rt
