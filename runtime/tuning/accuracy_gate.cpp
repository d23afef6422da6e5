#include "runtime/tuning/accuracy_gate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "qattn/error.hpp"

namespace qattn::rt {

namespace sim = reference::sim;

// The floors of rule (a). They catch wrong kernels (a broken one lands far below), not the last digits
// of accuracy, which the test suite and bench/ measure. On the check's data (Q with x10 channels, K with
// a +-5..20 channel bias, zero-mean V: harder than real V) correct INT8 kernels score 0.998-0.9995.
constexpr double kQuantizedMinCosine = 0.995;
// One scale for a whole Q, K or V tensor (per_tensor) is the coarsest INT8 format: a correct kernel lands
// just around 0.995 on such data (docs/perf.md, the main job's per_tensor row), so 0.995 would reject
// correct kernels now and then, while a broken one lands far below 0.99.
constexpr double kPerTensorMinCosine = 0.99;
// INT4 Q/K ([-7, 7] codes) cost more by themselves; where they cost more than this on the check's data,
// rule (b) holds the kernel to the format's own error instead.
constexpr double kInt4MinCosine = 0.98;
constexpr double kFloatMaxRelL2 = 1e-2;

double min_cosine(const Spec& spec) {
  if (spec.qk.fmt == Fmt::int4) return kInt4MinCosine;
  if (spec.qk.gran == Gran::per_tensor || spec.pv.gran == Gran::per_tensor) return kPerTensorMinCosine;
  return kQuantizedMinCosine;
}

namespace {

sim::Gran sim_gran(Gran g) {
  switch (g) {
    case Gran::per_tensor: return sim::Gran::per_tensor;
    case Gran::per_block: return sim::Gran::per_block;
    case Gran::per_warp: return sim::Gran::per_warp;
    case Gran::per_thread: return sim::Gran::per_thread;
    case Gran::per_token: return sim::Gran::per_token;
    default: break;
  }
  throw Error(ErrorKind::bad_input, std::string("the format simulation has no Q/K granularity ") + to_string(g) +
                                        "; accepted: per_tensor, per_block, per_warp, per_thread, per_token");
}

std::string fmt3(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

sim::SimConfig format_numerics(const Spec& spec, const Tiling& tiling) {
  if (spec.phase != Phase::prefill || !spec.quantized())
    throw Error(ErrorKind::bad_input, "the format simulation covers quantized prefill (qk=int8, int4 or fp8e4m3); got " + to_string(spec));
  sim::SimConfig c;
  c.qk_fp8 = spec.qk.fmt == Fmt::fp8e4m3;
  c.qk_qmax = c.qk_fp8 ? 0 : spec.qk.fmt == Fmt::int4 ? 7 : 127;
  c.gran = sim_gran(spec.qk.gran);
  c.smooth_q = (spec.smooth & kSmoothQ) != 0;
  c.smooth_k = (spec.smooth & kSmoothK) != 0;
  c.smooth_v = (spec.smooth & kSmoothV) != 0;
  c.delta_s_from_codes = true;   // the kernel's ΔS is one more mma on K's codes
  c.rotate = spec.rotate == Rotation::hadamard;
  switch (spec.pv.fmt) {
    case Fmt::int8:
      c.p = sim::PFormat::int8_paper;
      c.v = spec.pv.gran == Gran::per_tensor ? sim::VFormat::int8_per_tensor : sim::VFormat::int8_per_channel;
      break;
    case Fmt::fp8e4m3:
      c.p = sim::PFormat::e4m3_scaled;
      c.v = sim::VFormat::e4m3_per_channel;
      break;
    default:   // pv=fp16: P rounded to the 16-bit type, V read as given
      c.p = sim::PFormat::fp16;
      c.v = sim::VFormat::exact;
      break;
  }
  c.block_kv = tiling.block_n;
  // The quantization passes' per_block Q group and Q-smoothing block (runtime/calls/helper_kernels.cpp).
  c.q_block = kQMeanBlock;
  c.causal = spec.causal;
  return c;
}

std::vector<double> simulate_format_rows(const Spec& spec, const Tiling& tiling, const std::vector<float>& q,
                                         const std::vector<float>& k, const std::vector<float>& v,
                                         const reference::Dims& dims, const std::vector<reference::RowId>& rows) {
  sim::SimConfig config = format_numerics(spec, tiling);
  const int d = dims.d, group = dims.heads_q / dims.heads_kv;
  auto head = [d](const std::vector<float>& x, int heads, int seq, int b, int h) {
    sim::Mat m(seq, d);
    const size_t at = (static_cast<size_t>(b) * heads + h) * seq * d;
    for (size_t i = 0; i < m.v.size(); ++i) m.v[i] = x[at + i];
    return m;
  };
  // per_tensor is one scale for the whole tensor (every batch and head), as the quantization passes take
  // it: the abs-max of every head's quantized operand.
  const bool qk_tensor = (config.qk_fp8 || config.qk_qmax > 0) && config.gran == sim::Gran::per_tensor;
  const bool v_tensor = config.v == sim::VFormat::int8_per_tensor || config.v == sim::VFormat::e4m3_per_tensor;
  if (qk_tensor || v_tensor) {
    sim::OperandAmax all;
    for (int b = 0; b < dims.batch; ++b)
      for (int h = 0; h < dims.heads_q; ++h) {
        const sim::OperandAmax a = sim::operand_amax(head(q, dims.heads_q, dims.q_len, b, h),
                                                     head(k, dims.heads_kv, dims.kv_len, b, h / group),
                                                     head(v, dims.heads_kv, dims.kv_len, b, h / group), config);
        all = {std::max(all.q, a.q), std::max(all.k, a.k), std::max(all.v, a.v)};
      }
    if (qk_tensor) config.q_amax = all.q, config.k_amax = all.k;
    if (v_tensor) config.v_amax = all.v;
  }
  // Rows of one (batch, query head) are simulated together: the statistics cover the whole head.
  std::map<std::pair<int, int>, std::vector<size_t>> by_head;
  for (size_t i = 0; i < rows.size(); ++i) by_head[{rows[i].b, rows[i].h}].push_back(i);
  std::vector<double> out(rows.size() * static_cast<size_t>(dims.dv));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const auto& [bh, idx] : by_head) {
    const auto [b, h] = bh;
    std::vector<int> which;
    for (size_t i : idx) which.push_back(rows[i].i);
    const sim::Mat o = sim::simulate_attention(head(q, dims.heads_q, dims.q_len, b, h),
                                               head(k, dims.heads_kv, dims.kv_len, b, h / group),
                                               head(v, dims.heads_kv, dims.kv_len, b, h / group), which, scale, config);
    for (size_t j = 0; j < idx.size(); ++j)
      std::copy(o.row(static_cast<int>(j)), o.row(static_cast<int>(j)) + dims.dv, out.begin() + static_cast<long>(idx[j] * dims.dv));
  }
  return out;
}

GateVerdict accuracy_gate(const Spec& spec, const reference::ErrorMetrics& kernel, const reference::ErrorMetrics* format) {
  if (kernel.nonfinite > 0) return {false, std::to_string(kernel.nonfinite) + " non-finite outputs"};
  if (!spec.quantized()) {
    const bool ok = kernel.rel_l2 <= kFloatMaxRelL2;
    return {ok, "relL2 " + fmt3(kernel.rel_l2) + (ok ? " <= " : " > ") + fmt3(kFloatMaxRelL2)};
  }
  const double floor = min_cosine(spec);
  if (kernel.cosine >= floor) return {true, "cos " + fmt3(kernel.cosine) + " >= " + fmt3(floor)};
  const std::string below = "cos " + fmt3(kernel.cosine) + " < " + fmt3(floor);
  if (!format) return {false, below};
  if (format->cosine >= floor)
    return {false, below + " while the format itself reaches cos " + fmt3(format->cosine) + " on this data"};
  const double bound = kFormatErrorRatio * format->rel_l2 + kFormatErrorSlack;
  const std::string lossy = below + ", the format itself " + fmt3(format->cosine) + " (lossy on this data): relL2 " +
                            fmt3(kernel.rel_l2) + (kernel.rel_l2 <= bound ? " <= " : " > ") + fmt3(bound) +
                            " = " + fmt3(kFormatErrorRatio) + " x the format's " + fmt3(format->rel_l2) + " + " +
                            fmt3(kFormatErrorSlack);
  return {kernel.rel_l2 <= bound, lossy};
}

}  // namespace qattn::rt
