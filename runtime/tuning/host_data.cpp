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

}  // namespace qattn::rt
