// Host-side helpers of the runtime's own checks (the tuner's verification and timing inputs): fp16/bf16
// conversion and random data with the outliers real activations have. The float64 reference attention
// and the error metrics are the shared ones of reference/.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "qattn/abi.h"

namespace qattn::rt {

uint16_t float_to_half(float f);   // round to nearest even
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);   // round to nearest even
float bf16_to_float(uint16_t h);
uint16_t to_bits(Fmt fmt, float f);     // fmt: fp16 or bf16
float from_bits(Fmt fmt, uint16_t h);

// [rows][d] values ~N(0,1) with a per-channel offset on `biased_channels` channels (K's channel bias)
// and `scaled_channels` channels multiplied by 10 (Q's large channels).
std::vector<float> random_activations(std::mt19937_64& rng, long long rows, int d, int biased_channels,
                                      int scaled_channels);

}  // namespace qattn::rt
