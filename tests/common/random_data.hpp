// Fresh random test tensors with the outliers real Q/K/V show, exact fp16/bf16 host conversion, and
// poison values for output buffers.
//
// Seeds: every test run draws a new seed (fresh_seed) so repeated CI runs explore new data; put
// SCOPED_TRACE(seed_note(seed)) in the test so a failure prints it, and QATTN_SEED=<n> replays it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "tests/common/host_tensor.hpp"

namespace qattn {
namespace test {

std::uint64_t fresh_seed();                   // QATTN_SEED if set, else std::random_device
std::string seed_note(std::uint64_t seed);    // "seed=N (replay: QATTN_SEED=N)"

enum class Dist { normal, uniform };          // N(0, 1) or U(-0.5, 0.5)

// Channel outliers, the same channels for every (b, h, s) of a tensor, as in real activations.
struct Outliers {
  int biased_channels = 0;   // channels shifted by +-U(bias_min, bias_max): the K channel bias
  double bias_min = 5.0, bias_max = 20.0;
  int scaled_channels = 0;   // channels multiplied by `scale`: the large Q channels
  double scale = 10.0;
};

struct RandomSpec {
  Dist dist = Dist::normal;
  Outliers outliers;
};

RandomSpec plain(Dist dist = Dist::normal);        // no outliers
RandomSpec q_like(Dist dist = Dist::normal);       // 4 channels x10 (fewer when dim is small)
RandomSpec k_like(Dist dist = Dist::normal);       // 4 channels offset by +-[5, 20]
RandomSpec v_like(Dist dist = Dist::normal);       // 4 channels offset by +-[5, 10]

HostTensor random_tensor(const Shape& shape, Layout layout, const RandomSpec& spec, std::uint64_t seed);

// ---- fp16 / bf16 on the host: round-to-nearest-even from float64 in one step (no double rounding),
// subnormals, overflow to inf and NaN handled exactly.
std::uint16_t to_fp16_bits(double x);
std::uint16_t to_bf16_bits(double x);
double fp16_bits_to_double(std::uint16_t bits);
double bf16_bits_to_double(std::uint16_t bits);
std::uint16_t to_half_bits(double x, Fmt fmt);        // fmt: fp16 | bf16
double half_bits_to_double(std::uint16_t bits, Fmt fmt);

// Rounds every element to the nearest fp16/bf16 value, so a float64 reference sees what the GPU sees.
void round_to(HostTensor& t, Fmt fmt);
// Storage with the tensor's own strides (storage_size elements), ready to copy to the device.
std::vector<std::uint16_t> encode(const HostTensor& t, Fmt fmt);
HostTensor decode(const std::uint16_t* storage, const Shape& shape, const Strides& strides, Fmt fmt);

// ---- poison: fill output buffers before a kernel runs so unwritten elements cannot pass as results.
constexpr std::uint16_t kFp16NaN = 0x7e00;
constexpr std::uint16_t kBf16NaN = 0x7fc0;
constexpr std::int8_t kInt8Poison = -128;   // a symmetric quantizer never writes -128
void fill_nan(std::vector<std::uint16_t>& v, Fmt fmt);
void fill_nan(std::vector<float>& v);
void fill_nan(std::vector<double>& v);
void fill_poison(std::vector<std::int8_t>& v);

}  // namespace test
}  // namespace qattn
