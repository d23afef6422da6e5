#include "tests/common/quant_reference.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "qattn/decode/fp8_e4m3.h"
#include "qattn/quant/quant_config.h"

namespace qattn {
namespace test {

namespace {

size_t head_index(const Shape& sh, int b, int h) { return static_cast<size_t>(b) * sh.heads + h; }

void check_config(const QuantConfig& c) {
  if (c.gran != Gran::per_tensor && c.gran != Gran::per_block && c.gran != Gran::per_token &&
      c.gran != Gran::per_channel && c.gran != Gran::per_warp && c.gran != Gran::per_thread)
    throw std::invalid_argument("quantize_reference: granularity must be per_tensor, per_block, per_token, "
                                "per_channel, per_warp or per_thread");
  if (c.gran == Gran::per_block && c.group < 1)
    throw std::invalid_argument("quantize_reference: per_block needs group >= 1");
  if ((c.gran == Gran::per_warp || c.gran == Gran::per_thread) && c.group != 32 && c.group != 64)
    throw std::invalid_argument("quantize_reference: per_warp / per_thread need group 32 (Q) or 64 (K)");
  if (!(c.qmax >= 1)) throw std::invalid_argument("quantize_reference: qmax must be >= 1");
  if (c.fp8 && c.qmax != 448) throw std::invalid_argument("quantize_reference: e4m3 codes (fp8) take qmax 448");
  if (c.mean_sample < 0) throw std::invalid_argument("quantize_reference: mean_sample must be >= 0");
  if (c.rotate != quant::kRotateNone &&
      ((c.rotate != quant::kRotateQ && c.rotate != quant::kRotateK) || !quant::token_local_gran(c.gran)))
    throw std::invalid_argument("quantize_reference: rotate takes kRotateQ or kRotateK with token-local scales");
}

int round_code(double q, double qmax) {
  return static_cast<int>(std::clamp(std::nearbyint(q), -qmax, qmax));   // nearbyint: half to even
}

bool is_fragment(Gran g) { return g == Gran::per_warp || g == Gran::per_thread; }

// The code of x' / scale = q: an integer, or the e4m3 byte (as int8) with fp8.
int to_code(double q, const QuantConfig& c) {
  if (c.fp8) return static_cast<std::int8_t>(fp8::encode_e4m3(static_cast<float>(q)));
  return round_code(q, c.qmax);
}

double code_value(int code, const QuantConfig& c) {
  return c.fp8 ? static_cast<double>(fp8::decode_e4m3(static_cast<unsigned char>(code))) : static_cast<double>(code);
}

}  // namespace

double e4m3_step(double a) { return a < std::ldexp(1.0, -6) ? std::ldexp(1.0, -9) : std::ldexp(1.0, std::ilogb(a) - 3); }

int fragment_group(const QuantConfig& c, int s) {
  if (c.gran == Gran::per_warp) return s / c.group;
  if (c.gran == Gran::per_thread && c.group == 32) return s / 32 * 8 + s % 8;
  if (c.gran == Gran::per_thread) return s / 64 * 4 + s % 8 / 2;
  return -1;
}

long long QuantRef::scales_per_head() const {
  switch (config.gran) {
    case Gran::per_token:
    case Gran::per_warp:
    case Gran::per_thread: return shape.seq;
    case Gran::per_block: return (shape.seq + config.group - 1) / config.group;
    case Gran::per_channel: return shape.dim;
    default: return 0;
  }
}

long long QuantRef::scale_index(int b, int h, int s, int c) const {
  const long long head = static_cast<long long>(head_index(shape, b, h)) * scales_per_head();
  switch (config.gran) {
    case Gran::per_token:
    case Gran::per_warp:
    case Gran::per_thread: return head + s;
    case Gran::per_block: return head + s / config.group;
    case Gran::per_channel: return head + c;
    default: return 0;
  }
}

std::vector<int> mean_tokens(int seq, int sample) {
  const int tokens = quant::stats_tokens(seq, sample);
  std::vector<int> out(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) out[static_cast<size_t>(i)] = quant::sampled_token(i, seq, tokens);
  return out;
}

std::vector<double> channel_mean(const HostTensor& x, int sample) {
  const Shape& sh = x.shape;
  const std::vector<int> tokens = mean_tokens(sh.seq, sample);
  std::vector<double> mean(static_cast<size_t>(sh.batch) * sh.heads * sh.dim, 0.0);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int c = 0; c < sh.dim; ++c) {
        double sum = 0;
        for (int s : tokens) sum += x.at(b, h, s, c);
        mean[head_index(sh, b, h) * sh.dim + c] = tokens.empty() ? 0.0 : sum / static_cast<double>(tokens.size());
      }
  return mean;
}

HostTensor centred_rows(const HostTensor& x, const std::vector<double>& mean, int rotate) {
  HostTensor out = x;
  const Shape& sh = x.shape;
  std::vector<double> row(static_cast<size_t>(sh.dim));
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s) {
        for (int c = 0; c < sh.dim; ++c)
          row[static_cast<size_t>(c)] = x.at(b, h, s, c) - (mean.empty() ? 0.0 : mean[head_index(sh, b, h) * sh.dim + c]);
        if (rotate != quant::kRotateNone) quant::rotate_row_reference(row.data(), sh.dim, rotate);
        for (int c = 0; c < sh.dim; ++c) out.at(b, h, s, c) = row[static_cast<size_t>(c)];
      }
  return out;
}

HostTensor subtract_channel_mean(const HostTensor& x, int sample) {
  return centred_rows(x, channel_mean(x, sample), quant::kRotateNone);
}

QuantRef quantize_reference(const HostTensor& x, const QuantConfig& config) {
  check_config(config);
  QuantRef r;
  r.shape = x.shape;
  r.config = config;
  const Shape& sh = x.shape;
  if (config.smooth) r.mean = channel_mean(x, config.mean_sample);
  const HostTensor xc = centred_rows(x, r.mean, config.rotate);   // x'
  r.scales.assign(config.gran == Gran::per_tensor ? 1 : static_cast<size_t>(r.scales_per_head()) * sh.batch * sh.heads,
                  0.0);

  // Pass 1: abs-max of every scale group, kept in `scales` until divided by qmax.
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s)
        for (int c = 0; c < sh.dim; ++c) {
          double& amax = r.scales[r.scale_index(b, h, s, c)];
          amax = std::max(amax, std::fabs(xc.at(b, h, s, c)));
        }
  // per_warp / per_thread: the rows' abs-maxes so far; each row takes its group's max (expanded).
  if (is_fragment(config.gran))
    for (int b = 0; b < sh.batch; ++b)
      for (int h = 0; h < sh.heads; ++h) {
        const long long head = r.scale_index(b, h, 0, 0);
        std::vector<double> group_amax(static_cast<size_t>(sh.seq) + 1, 0.0);
        for (int s = 0; s < sh.seq; ++s) {
          double& g = group_amax[static_cast<size_t>(fragment_group(config, s))];
          g = std::max(g, r.scales[static_cast<size_t>(head + s)]);
        }
        for (int s = 0; s < sh.seq; ++s)
          r.scales[static_cast<size_t>(head + s)] = group_amax[static_cast<size_t>(fragment_group(config, s))];
      }
  for (double& s : r.scales) s /= config.qmax;

  // Pass 2: codes.
  r.codes.resize(static_cast<size_t>(sh.numel()));
  size_t i = 0;
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s)
        for (int c = 0; c < sh.dim; ++c, ++i) {
          const double scale = r.scale(b, h, s, c);
          r.codes[i] = static_cast<std::int8_t>(scale > 0 ? to_code(xc.at(b, h, s, c) / scale, config) : 0);
        }
  return r;
}

double QuantRef::value(int b, int h, int s, int c) const { return code_value(code(b, h, s, c), config) * scale(b, h, s, c); }

HostTensor QuantRef::dequantize() const {
  HostTensor t = HostTensor::zeros(shape, Layout::bhsd);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int s = 0; s < shape.seq; ++s)
        for (int c = 0; c < shape.dim; ++c)
          t.at(b, h, s, c) = value(b, h, s, c) + (config.rotate ? 0.0 : mean_at(b, h, c));
  return t;
}

std::string QuantCheck::report() const {
  return "elements=" + std::to_string(elements) + " differ_from_ref=" + std::to_string(differ_from_ref) +
         " bad_codes=" + std::to_string(bad_codes) + " bad_scales=" + std::to_string(bad_scales) +
         " bad_means=" + std::to_string(bad_means) + " bad_padding=" + std::to_string(bad_padding) +
         (first_problem.empty() ? "" : " first: " + first_problem);
}

QuantCheck check_quantized(const HostTensor& x, const QuantRef& ref, const QuantizedView& got) {
  QuantCheck r;
  const Shape& sh = ref.shape;
  const QuantConfig& cfg = ref.config;
  auto problem = [&](long long& counter, const std::string& what) {
    ++counter;
    if (r.first_problem.empty()) r.first_problem = what;
  };
  auto where = [](int b, int h, int s, int c) {
    return "(b=" + std::to_string(b) + " h=" + std::to_string(h) + " s=" + std::to_string(s) +
           " c=" + std::to_string(c) + ")";
  };
  auto got_mean = [&](int b, int h, int c) -> double {
    return cfg.smooth ? static_cast<double>(got.mean[head_index(sh, b, h) * sh.dim + c]) : 0.0;
  };
  auto got_scale = [&](int b, int h, int s, int c) -> double {
    const long long head = b * got.scale_sb + h * got.scale_sh;
    switch (cfg.gran) {
      case Gran::per_token:
      case Gran::per_warp:
      case Gran::per_thread: return got.scales[head + s];
      case Gran::per_block: return got.scales[head + s / cfg.group];
      case Gran::per_channel: return got.scales[head + c];
      default: return got.scales[0];
    }
  };

  // Means, and the largest mean error of each head (the scale tolerance grows with it).
  std::vector<double> mean_err(static_cast<size_t>(sh.batch) * sh.heads * sh.dim, 0.0);
  if (cfg.smooth) {
    if (!got.mean) throw std::invalid_argument("check_quantized: smoothing needs the kernel's mean");
    const std::vector<int> tokens = mean_tokens(sh.seq, cfg.mean_sample);   // what the kernel summed
    for (int b = 0; b < sh.batch; ++b)
      for (int h = 0; h < sh.heads; ++h)
        for (int c = 0; c < sh.dim; ++c) {
          double mean_abs = 0;
          for (int s : tokens) mean_abs += std::fabs(x.at(b, h, s, c));
          mean_abs /= std::max<double>(1, static_cast<double>(tokens.size()));
          const double err = std::fabs(got_mean(b, h, c) - ref.mean_at(b, h, c));
          mean_err[head_index(sh, b, h) * sh.dim + c] = err;
          if (!(err <= 1e-5 * mean_abs + 1e-30))
            problem(r.bad_means, "mean " + where(b, h, -1, c) + " got " + std::to_string(got_mean(b, h, c)) +
                                     " want " + std::to_string(ref.mean_at(b, h, c)));
        }
  }
  auto mean_err_of = [&](int b, int h, int c) -> double {
    if (!cfg.smooth) return 0.0;
    if (cfg.gran == Gran::per_channel) return mean_err[head_index(sh, b, h) * sh.dim + c];
    if (cfg.gran == Gran::per_tensor) return *std::max_element(mean_err.begin(), mean_err.end());
    const auto first = mean_err.begin() + static_cast<long long>(head_index(sh, b, h)) * sh.dim;
    return *std::max_element(first, first + sh.dim);
  };

  // Scales: visit each scale once through its first element.
  std::vector<char> seen(ref.scales.size(), 0);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h)
      for (int s = 0; s < sh.seq; ++s)
        for (int c = 0; c < sh.dim; ++c) {
          const long long idx = ref.scale_index(b, h, s, c);
          if (seen[idx]) continue;
          seen[idx] = 1;
          const double want = ref.scales[idx], have = got_scale(b, h, s, c);
          const double tol = 1e-6 * want + mean_err_of(b, h, c) / cfg.qmax;
          if (!(std::fabs(have - want) <= tol))
            problem(r.bad_scales, "scale " + where(b, h, s, c) + " got " + std::to_string(have) + " want " +
                                      std::to_string(want));
        }

  // Codes, against the kernel's own mean and scale (x' from the kernel's mean: rotated when rotating).
  std::vector<double> kernel_mean;
  if (cfg.smooth)
    for (int b = 0; b < sh.batch; ++b)
      for (int h = 0; h < sh.heads; ++h)
        for (int c = 0; c < sh.dim; ++c) kernel_mean.push_back(got_mean(b, h, c));
  const HostTensor xc = centred_rows(x, kernel_mean, cfg.rotate);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h) {
      for (int s = 0; s < sh.seq; ++s)
        for (int c = 0; c < sh.dim; ++c) {
          ++r.elements;
          const int have = got.codes[b * got.strides.sb + h * got.strides.sh + s * got.strides.ss + c * got.strides.sc];
          const double scale = got_scale(b, h, s, c);
          const double q = scale > 0 ? xc.at(b, h, s, c) / scale : 0.0;
          const int want = scale > 0 ? to_code(q, cfg) : 0;
          const int ref_code = ref.code(b, h, s, c);
          if (cfg.fp8) {
            // e4m3: the nearest value, or its neighbour where x' / scale lies within the kernel's fp32 error
            // of their midpoint: a few ulps of the group's range (448), d of them when the row was rotated
            // (its sums of d terms); in code units that can be a good part of a subnormal step (2^-9).
            const double v = code_value(have, cfg), w = code_value(want, cfg);
            const double eps = 448.0 * (cfg.rotate ? sh.dim * std::ldexp(1.0, -24) : std::ldexp(1.0, -21));
            const double larger = std::max(std::fabs(v), std::fabs(w));
            const double step = e4m3_step(larger);
            const bool tie_ok = std::fabs(v - w) <= step * (1 + 1e-9) &&
                                std::fabs(v - q) - std::fabs(w - q) <= std::max(1e-3 * std::fabs(v - w), eps);
            if (have != ref_code) ++r.differ_from_ref;
            if (!std::isfinite(v) || (have != want && !tie_ok))
              problem(r.bad_codes, "e4m3 code " + where(b, h, s, c) + " got " + std::to_string(v) + " want " +
                                       std::to_string(w) + " (x'/scale " + std::to_string(q) + ")");
            continue;
          }
          const double tie_distance = std::fabs(q - std::floor(q) - 0.5);
          const bool tie_ok = std::abs(have - want) == 1 && tie_distance <= 1e-3;
          if (have != ref_code) ++r.differ_from_ref;
          if (std::abs(have) > cfg.qmax || (have != want && !tie_ok) || std::abs(have - ref_code) > 1)
            problem(r.bad_codes, "code " + where(b, h, s, c) + " got " + std::to_string(have) + " want " +
                                     std::to_string(want) + " (ref " + std::to_string(ref_code) + ")");
        }
      for (int s = sh.seq; s < got.seq_pad; ++s)
        for (int c = 0; c < sh.dim; ++c)
          if (got.codes[b * got.strides.sb + h * got.strides.sh + s * got.strides.ss + c * got.strides.sc] != 0)
            problem(r.bad_padding, "padding " + where(b, h, s, c) + " not zero");
    }
  return r;
}

std::vector<std::uint8_t> pack_int4(const std::vector<std::int8_t>& codes, int d) {
  if (d % 2 != 0 || codes.size() % static_cast<size_t>(d) != 0) throw std::invalid_argument("pack_int4: rows of an even d");
  std::vector<std::uint8_t> out(codes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int lo = codes[2 * i], hi = codes[2 * i + 1];
    if (lo < -8 || lo > 7 || hi < -8 || hi > 7) throw std::invalid_argument("pack_int4: a code outside [-8, 7]");
    out[i] = static_cast<std::uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
  }
  return out;
}

std::vector<std::int8_t> unpack_int4(const std::vector<std::uint8_t>& packed, int d) {
  if (d % 2 != 0 || packed.size() % static_cast<size_t>(d / 2) != 0) throw std::invalid_argument("unpack_int4: rows of an even d");
  std::vector<std::int8_t> out(packed.size() * 2);
  auto nibble = [](int v) { return static_cast<std::int8_t>(v >= 8 ? v - 16 : v); };
  for (size_t i = 0; i < packed.size(); ++i) {
    out[2 * i] = nibble(packed[i] & 0xf);
    out[2 * i + 1] = nibble(packed[i] >> 4);
  }
  return out;
}

}  // namespace test
}  // namespace qattn
