// pack_linear_weight / unpacked_weight (include/qattn/linear.hpp): the weight formats of the linear
// kernels, written and read on the host, code for code as templates/qattn/abi.h's LinearParams says.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "qattn/error.hpp"
#include "qattn/linear.hpp"
#include "qattn/validate.hpp"
#include "runtime/tuning/host_data.hpp"

namespace qattn {
namespace {

void require_linear(const Spec& spec) {
  if (spec.phase != Phase::linear) throw_bad_input("a linear weight needs a linear spec, not " + to_string(spec));
  require(validate(spec));
}

}  // namespace

PackedLinearWeight pack_linear_weight(const Spec& spec, const float* w) {
  require_linear(spec);
  if (!w) throw_bad_input("pack_linear_weight: w is null");
  const int n = spec.n, k = spec.k;
  PackedLinearWeight out;
  switch (spec.weight.fmt) {
    case Fmt::fp16:
    case Fmt::bf16: {
      out.bytes.resize(static_cast<size_t>(n) * k * 2);
      for (size_t i = 0; i < static_cast<size_t>(n) * k; ++i) {
        const std::uint16_t b = rt::to_bits(spec.weight.fmt, w[i]);
        std::memcpy(&out.bytes[2 * i], &b, 2);
      }
      break;
    }
    case Fmt::int8: {
      out.bytes.resize(static_cast<size_t>(n) * k);
      out.scale.resize(n);
      for (int r = 0; r < n; ++r) {
        const float* row = w + static_cast<size_t>(r) * k;
        float amax = 0;
        for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
        const float scale = amax > 0 ? amax / 127.0f : 1.0f;
        out.scale[r] = scale;
        for (int c = 0; c < k; ++c) {
          const float q = std::nearbyint(row[c] / scale);
          out.bytes[static_cast<size_t>(r) * k + c] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f)));
        }
      }
      break;
    }
    case Fmt::int4: {
      const int groups = k / kLinearInt4Group;
      out.bytes.assign(static_cast<size_t>(n) * k / 2, 0);
      out.scale.resize(static_cast<size_t>(n) * groups);
      out.zero.resize(static_cast<size_t>(n) * groups);
      for (int r = 0; r < n; ++r)
        for (int g = 0; g < groups; ++g) {
          const float* x = w + static_cast<size_t>(r) * k + static_cast<size_t>(g) * kLinearInt4Group;
          float lo = x[0], hi = x[0];
          for (int c = 1; c < kLinearInt4Group; ++c) lo = std::min(lo, x[c]), hi = std::max(hi, x[c]);
          // The range always holds 0, so that an all-positive or all-negative group keeps its zero exact.
          lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);
          const float scale = hi > lo ? (hi - lo) / 15.0f : 1.0f;
          const float zero = std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f);
          const size_t at = static_cast<size_t>(r) * groups + g;
          out.scale[at] = scale;
          out.zero[at] = zero;
          for (int c = 0; c < kLinearInt4Group; ++c) {
            const int code = static_cast<int>(std::clamp(std::nearbyint(x[c] / scale) + zero, 0.0f, 15.0f));
            const size_t kk = static_cast<size_t>(g) * kLinearInt4Group + c;
            std::uint8_t& byte = out.bytes[static_cast<size_t>(r) * (k / 2) + kk / 2];
            byte |= static_cast<std::uint8_t>(kk % 2 == 0 ? code : code << 4);
          }
        }
      break;
    }
    default: break;   // validate() refused every other format
  }
  return out;
}

double unpacked_weight(const Spec& spec, const PackedLinearWeight& p, int n, int kk) {
  require_linear(spec);
  if (n < 0 || n >= spec.n || kk < 0 || kk >= spec.k)
    throw_bad_input("unpacked_weight: (" + std::to_string(n) + ", " + std::to_string(kk) + ") is outside [" +
                    std::to_string(spec.n) + ", " + std::to_string(spec.k) + "]");
  const size_t i = static_cast<size_t>(n) * spec.k + kk;
  switch (spec.weight.fmt) {
    case Fmt::fp16:
    case Fmt::bf16: {
      std::uint16_t b;
      std::memcpy(&b, &p.bytes.at(2 * i), 2);
      return rt::from_bits(spec.weight.fmt, b);
    }
    case Fmt::int8: return static_cast<double>(static_cast<std::int8_t>(p.bytes.at(i))) * p.scale.at(n);
    case Fmt::int4: {
      const std::uint8_t byte = p.bytes.at(static_cast<size_t>(n) * (spec.k / 2) + kk / 2);
      const int code = kk % 2 == 0 ? byte & 15 : byte >> 4;
      const size_t g = static_cast<size_t>(n) * (spec.k / kLinearInt4Group) + kk / kLinearInt4Group;
      return (code - static_cast<double>(p.zero.at(g))) * p.scale.at(g);
    }
    default: return 0;
  }
}

}  // namespace qattn
