// Host-side helpers of the runtime's own checks (the tuner's verification and timing inputs): fp16/bf16
// conversion, random data with the outliers real activations have, and a float64 reference attention.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "qattn/abi.h"
#include "qattn/problem.hpp"

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

// A query row of a problem: batch, query head, position.
struct RowId {
  int b, h, i;
};
// Up to max_heads (batch, head) pairs times up to max_rows rows, spread evenly (first and last included):
// a float64 check of a large problem in a second instead of minutes.
std::vector<RowId> sample_rows(const Problem& p, int max_heads, int max_rows);

// Float64 attention of the listed rows over contiguous [b, h, s, d] inputs; causal aligned bottom-right;
// GQA by h / (hq/hkv). Rows that see no key produce zeros. Output: rows.size() x d.
std::vector<double> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const Problem& p, int d, bool causal,
                                        double softmax_scale, const std::vector<RowId>& rows);

struct Agreement {
  double cosine = 0, rel_l2 = 0, max_abs = 0;
  long long non_finite = 0;
};
Agreement compare(const std::vector<float>& got, const std::vector<double>& want);

}  // namespace qattn::rt
