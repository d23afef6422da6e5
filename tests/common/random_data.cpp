#include "tests/common/random_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

namespace qattn {
namespace test {

std::uint64_t fresh_seed() {
  if (const char* env = std::getenv("QATTN_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string seed_note(std::uint64_t seed) {
  return "seed=" + std::to_string(seed) + " (replay: QATTN_SEED=" + std::to_string(seed) + ")";
}

RandomSpec plain(Dist dist) { return RandomSpec{dist, Outliers{}}; }

RandomSpec q_like(Dist dist) {
  RandomSpec s{dist, Outliers{}};
  s.outliers.scaled_channels = 4;
  return s;
}

RandomSpec k_like(Dist dist) {
  RandomSpec s{dist, Outliers{}};
  s.outliers.biased_channels = 4;
  return s;
}

RandomSpec v_like(Dist dist) {
  RandomSpec s{dist, Outliers{}};
  s.outliers.biased_channels = 4;
  s.outliers.bias_min = 5.0;
  s.outliers.bias_max = 10.0;
  return s;
}

HostTensor random_tensor(const Shape& shape, Layout layout, const RandomSpec& spec, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t = HostTensor::zeros(shape, layout);

  // Outlier channels: distinct, chosen once per tensor.
  std::vector<int> channels(shape.dim);
  std::iota(channels.begin(), channels.end(), 0);
  std::shuffle(channels.begin(), channels.end(), rng);
  std::vector<double> offset(shape.dim, 0.0), factor(shape.dim, 1.0);
  const int n_bias = std::min(spec.outliers.biased_channels, shape.dim);
  const int n_scale = std::min(spec.outliers.scaled_channels, shape.dim - n_bias);
  std::uniform_real_distribution<double> bias(spec.outliers.bias_min, spec.outliers.bias_max);
  std::bernoulli_distribution negative(0.5);
  for (int i = 0; i < n_bias; ++i) offset[channels[i]] = (negative(rng) ? -1.0 : 1.0) * bias(rng);
  for (int i = 0; i < n_scale; ++i) factor[channels[n_bias + i]] = spec.outliers.scale;

  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(-0.5, 0.5);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int s = 0; s < shape.seq; ++s)
        for (int c = 0; c < shape.dim; ++c) {
          const double r = spec.dist == Dist::normal ? normal(rng) : uniform(rng);
          t.at(b, h, s, c) = r * factor[c] + offset[c];
        }
  return t;
}

namespace {

// IEEE binary format with `ebits` exponent and `mbits` mantissa bits. Rounding happens once, on the
// float64 value scaled by the quantum of its binade: nearbyint rounds half to even.
std::uint16_t encode_ieee(double x, int ebits, int mbits) {
  const std::uint32_t sign = std::signbit(x) ? 1u << (ebits + mbits) : 0u;
  const std::uint32_t exp_all_ones = ((1u << ebits) - 1u) << mbits;
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | exp_all_ones | (1u << (mbits - 1)));
  const double a = std::fabs(x);
  if (std::isinf(a)) return static_cast<std::uint16_t>(sign | exp_all_ones);
  if (a == 0.0) return static_cast<std::uint16_t>(sign);
  const int bias = (1 << (ebits - 1)) - 1;
  const int emin = 1 - bias;
  int e2 = 0;
  std::frexp(a, &e2);                       // a in [2^(e2-1), 2^e2)
  const int e = std::max(e2 - 1, emin);     // binade; subnormals share the quantum of emin
  const double r = std::nearbyint(std::ldexp(a, mbits - e));
  // Exponent field (e + bias - 1) plus r: r >= 2^mbits carries the implicit bit into the exponent,
  // which also covers subnormals (field 0) and a round-up into the next binade.
  const double bits = std::ldexp(static_cast<double>(e + bias - 1), mbits) + r;
  if (bits >= exp_all_ones) return static_cast<std::uint16_t>(sign | exp_all_ones);   // overflow: inf
  return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(bits));
}

double decode_ieee(std::uint16_t bits, int ebits, int mbits) {
  const bool negative = (bits >> (ebits + mbits)) & 1u;
  const int field = (bits >> mbits) & ((1 << ebits) - 1);
  const std::uint32_t mant = bits & ((1u << mbits) - 1u);
  const int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (field == (1 << ebits) - 1) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mbits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << mbits)), field - bias - mbits);
  }
  return negative ? -v : v;
}

void require_half(Fmt fmt) {
  if (fmt != Fmt::fp16 && fmt != Fmt::bf16) throw std::invalid_argument("format must be fp16 or bf16");
}

}  // namespace

std::uint16_t to_fp16_bits(double x) { return encode_ieee(x, 5, 10); }
std::uint16_t to_bf16_bits(double x) { return encode_ieee(x, 8, 7); }
double fp16_bits_to_double(std::uint16_t bits) { return decode_ieee(bits, 5, 10); }
double bf16_bits_to_double(std::uint16_t bits) { return decode_ieee(bits, 8, 7); }

std::uint16_t to_half_bits(double x, Fmt fmt) {
  require_half(fmt);
  return fmt == Fmt::fp16 ? to_fp16_bits(x) : to_bf16_bits(x);
}

double half_bits_to_double(std::uint16_t bits, Fmt fmt) {
  require_half(fmt);
  return fmt == Fmt::fp16 ? fp16_bits_to_double(bits) : bf16_bits_to_double(bits);
}

void round_to(HostTensor& t, Fmt fmt) {
  for (double& v : t.data) v = half_bits_to_double(to_half_bits(v, fmt), fmt);
}

std::vector<std::uint16_t> encode(const HostTensor& t, Fmt fmt) {
  std::vector<std::uint16_t> out(t.data.size(), 0);
  for (size_t i = 0; i < t.data.size(); ++i) out[i] = to_half_bits(t.data[i], fmt);
  return out;
}

HostTensor decode(const std::uint16_t* storage, const Shape& shape, const Strides& strides, Fmt fmt) {
  HostTensor t;
  t.shape = shape;
  t.strides = strides;
  t.data.resize(static_cast<size_t>(storage_size(shape, strides)));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = half_bits_to_double(storage[i], fmt);
  return t;
}

void fill_nan(std::vector<std::uint16_t>& v, Fmt fmt) {
  require_half(fmt);
  std::fill(v.begin(), v.end(), fmt == Fmt::fp16 ? kFp16NaN : kBf16NaN);
}
void fill_nan(std::vector<float>& v) { std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN()); }
void fill_nan(std::vector<double>& v) {
  std::fill(v.begin(), v.end(), std::numeric_limits<double>::quiet_NaN());
}
void fill_poison(std::vector<std::int8_t>& v) { std::fill(v.begin(), v.end(), kInt8Poison); }

}  // namespace test
}  // namespace qattn
