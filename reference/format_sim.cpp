#include "reference/format_sim.hpp"

#include "qattn/quant/quant_config.h"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace qattn::reference::sim {

const char* to_string(Gran g) {
  switch (g) {
    case Gran::per_tensor: return "per-tensor";
    case Gran::per_block: return "per-block";
    case Gran::per_warp: return "per-warp";
    case Gran::per_thread: return "per-thread";
    case Gran::per_token: return "per-token";
  }
  return "?";
}

// The row -> scale group maps.
//  per_warp, Q: SageAttention2 §3.2 splits a b_q = 128 block over c_w = 4 warps, one scale per
//    b_q / c_w = 32 consecutive rows (the rows one warp's m16 mma tiles cover; WARPQ = 32 in the code).
//    K: Algorithm 1 loads one δ_K[j] per key block, so K stays per 64-key block.
//  per_thread (the public code, quant_per_thread.py): in an m16n8 mma the accumulator fragment of lane
//    L covers rows L/4 and L/4 + 8 and columns 2(L%4), 2(L%4) + 1. Over a warp's 32 query rows (two m16
//    tiles) lane L touches rows {g, g+8, g+16, g+24}, g = L/4 = r % 8: 8 Q groups per 32-row tile.
//    Over a 64-key tile (eight n8 tiles) it touches keys {8i + 2t, 8i + 2t + 1 : i = 0..7}, t = L%4 =
//    (r % 8) / 2: 4 K groups per 64-key tile. Each thread then needs one Q scale and one K scale.
int scale_group(Gran g, Role role, int r, int q_block) {
  switch (g) {
    case Gran::per_tensor: return 0;
    case Gran::per_block: return role == Role::q ? r / q_block : r / kBlockK;
    case Gran::per_warp: return role == Role::q ? r / kWarpQ : r / kBlockK;
    case Gran::per_thread: return role == Role::q ? (r / kWarpQ) * 8 + r % 8 : (r / kBlockK) * 4 + (r % 8) / 2;
    case Gran::per_token: return r;
  }
  return 0;
}

namespace {

// The abs-max of each scale group (see quantize_int).
std::vector<double> group_amax(const Mat& x, Gran g, Role role, int q_block, double tensor_amax) {
  int groups = 0;
  for (int r = 0; r < x.rows; ++r) groups = std::max(groups, scale_group(g, role, r, q_block) + 1);
  std::vector<double> amax(static_cast<size_t>(groups), 0.0);
  for (int r = 0; r < x.rows; ++r) {
    double& a = amax[static_cast<size_t>(scale_group(g, role, r, q_block))];
    for (int c = 0; c < x.cols; ++c) a = std::max(a, std::fabs(x.at(r, c)));
  }
  if (g == Gran::per_tensor && tensor_amax > 0)
    for (double& a : amax) a = std::max(a, tensor_amax);
  return amax;
}

}  // namespace

Quantized quantize_int(const Mat& x, Gran g, Role role, int qmax, int q_block, double tensor_amax) {
  const std::vector<double> amax = group_amax(x, g, role, q_block, tensor_amax);
  Quantized out;
  out.deq = Mat(x.rows, x.cols);
  out.codes.resize(x.v.size());
  out.scales.resize(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) out.scales[i] = amax[i] / qmax;
  for (int r = 0; r < x.rows; ++r) {
    const double s = out.scales[static_cast<size_t>(scale_group(g, role, r, q_block))];
    for (int c = 0; c < x.cols; ++c) {
      // An all-zero group: scale 0 and code 0, never 0/0.
      const double q = s > 0 ? std::nearbyint(x.at(r, c) / s) : 0.0;
      const int code = static_cast<int>(std::clamp(q, -static_cast<double>(qmax), static_cast<double>(qmax)));
      out.codes[static_cast<size_t>(r) * x.cols + c] = code;
      out.deq.at(r, c) = code * s;
    }
  }
  return out;
}

Mat quantize_e4m3(const Mat& x, Gran g, Role role, int q_block, double tensor_amax) {
  const std::vector<double> amax = group_amax(x, g, role, q_block, tensor_amax);
  Mat y(x.rows, x.cols);
  for (int r = 0; r < x.rows; ++r) {
    const double s = amax[static_cast<size_t>(scale_group(g, role, r, q_block))] / 448;
    for (int c = 0; c < x.cols; ++c) y.at(r, c) = s > 0 ? round_e4m3(x.at(r, c) / s) * s : 0.0;
  }
  return y;
}

namespace {

// Round |x| to a binary float with `mant` stored mantissa bits and minimum normal exponent `emin`
// (subnormals below it keep the spacing 2^(emin - mant)); ties to even through nearbyint.
double round_binary(double x, int mant, int emin) {
  const double a = std::fabs(x);
  if (a == 0 || !std::isfinite(a)) return x;
  int e = 0;
  std::frexp(a, &e);   // a = f * 2^e, f in [0.5, 1): the leading bit is 2^(e - 1)
  const double step = std::ldexp(1.0, std::max(e - 1, emin) - mant);
  return std::copysign(std::nearbyint(a / step) * step, x);
}

}  // namespace

double round_fp16(double x) {
  const double r = round_binary(x, 10, -14);
  return std::fabs(r) > 65504 ? std::copysign(std::numeric_limits<double>::infinity(), x) : r;
}

double round_e4m3(double x) {
  if (std::isnan(x)) return x;
  const double r = round_binary(x, 3, -6);
  return std::fabs(r) > 448 ? std::copysign(448.0, x) : r;   // satfinite
}

std::vector<double> channel_mean(const Mat& x) {
  std::vector<double> m(static_cast<size_t>(x.cols), 0.0);
  for (int r = 0; r < x.rows; ++r)
    for (int c = 0; c < x.cols; ++c) m[static_cast<size_t>(c)] += x.at(r, c);
  for (double& v : m) v /= std::max(1, x.rows);
  return m;
}

Mat rotate_rows(const Mat& x, Role side) {
  Mat y = x;
  for (int r = 0; r < y.rows; ++r)
    qattn::quant::rotate_row_reference(&y.at(r, 0), y.cols, side == Role::q ? qattn::quant::kRotateQ : qattn::quant::kRotateK);
  return y;
}

Mat subtract(const Mat& x, const std::vector<double>& mean) {
  Mat y = x;
  for (int r = 0; r < x.rows; ++r)
    for (int c = 0; c < x.cols; ++c) y.at(r, c) -= mean[static_cast<size_t>(c)];
  return y;
}

namespace {

double abs_max(const Mat& x) {
  double amax = 0;
  for (double v : x.v) amax = std::max(amax, std::fabs(v));
  return amax;
}

// Per-tensor e4m3 with scale amax / 448 (the FP8 baseline's Q, K and V); tensor_amax as quantize_int's.

// Per-channel symmetric quantization: scale amax_c / max_code, x̂ = code(x / scale) * scale, where `code`
// rounds onto the format's grid (an all-zero channel stays 0).
template <class Code>
Mat per_channel(const Mat& x, double max_code, Code code) {
  std::vector<double> amax(static_cast<size_t>(x.cols), 0.0);
  for (int r = 0; r < x.rows; ++r)
    for (int c = 0; c < x.cols; ++c) amax[static_cast<size_t>(c)] = std::max(amax[static_cast<size_t>(c)], std::fabs(x.at(r, c)));
  Mat y = x;
  for (int r = 0; r < x.rows; ++r)
    for (int c = 0; c < x.cols; ++c) {
      const double s = amax[static_cast<size_t>(c)] / max_code;
      y.at(r, c) = s > 0 ? code(x.at(r, c) / s) * s : 0.0;
    }
  return y;
}

// SageAttention2's V (§3.5): e4m3, scale amax_c / 448.
Mat e4m3_per_channel(const Mat& x) { return per_channel(x, 448, [](double u) { return round_e4m3(u); }); }

// INT-FlashAttention's V with one scale per channel: int8 codes, scale amax_c / 127.
Mat int8_per_channel(const Mat& x) {
  return per_channel(x, 127, [](double u) { return std::clamp(std::nearbyint(u), -127.0, 127.0); });
}

Mat quantize_v(const Mat& v, VFormat f, double tensor_amax) {
  switch (f) {
    case VFormat::exact: return v;
    case VFormat::fp16: {
      Mat y = v;
      for (double& x : y.v) x = round_fp16(x);
      return y;
    }
    case VFormat::int8_per_tensor: return quantize_int(v, Gran::per_tensor, Role::k, 127, kBlockQ, tensor_amax).deq;
    case VFormat::int8_per_channel: return int8_per_channel(v);
    case VFormat::e4m3_per_channel: return e4m3_per_channel(v);
    case VFormat::e4m3_per_tensor: return quantize_e4m3(v, Gran::per_tensor, Role::k, kBlockQ, tensor_amax);
  }
  return v;
}

double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

namespace {

// The operands as the quantizers see them: Q and K smoothed (Q's block means kept for ΔS) and rotated, V
// smoothed (its mean kept for O).
struct Operands {
  Mat ks, qmean, qh, kh, vs;
  std::vector<double> vmean;
};

Operands prepare_operands(const Mat& q, const Mat& k, const Mat& v, const SimConfig& cfg) {
  const int d = q.cols;
  Operands o;
  o.ks = cfg.smooth_k ? subtract(k, channel_mean(k)) : k;
  Mat qs = q;
  if (cfg.smooth_q) {   // per q_block-row block mean of Q, [blocks][d]
    const int blocks = (q.rows + cfg.q_block - 1) / cfg.q_block;
    o.qmean = Mat(blocks, d);
    for (int b = 0; b < blocks; ++b) {
      const int lo = b * cfg.q_block, hi = std::min(q.rows, lo + cfg.q_block);
      for (int r = lo; r < hi; ++r)
        for (int c = 0; c < d; ++c) o.qmean.at(b, c) += q.at(r, c) / (hi - lo);
      for (int r = lo; r < hi; ++r)
        for (int c = 0; c < d; ++c) qs.at(r, c) -= o.qmean.at(b, c);
    }
  }
  o.qh = cfg.rotate ? rotate_rows(qs, Role::q) : qs;
  o.kh = cfg.rotate ? rotate_rows(o.ks, Role::k) : o.ks;
  o.vs = v;
  if (cfg.smooth_v) {
    o.vmean = channel_mean(v);
    o.vs = subtract(v, o.vmean);
  }
  return o;
}

}  // namespace

OperandAmax operand_amax(const Mat& q, const Mat& k, const Mat& v, const SimConfig& cfg) {
  const Operands o = prepare_operands(q, k, v, cfg);
  return OperandAmax{abs_max(o.qh), abs_max(o.kh), abs_max(o.vs)};
}

Mat simulate_attention(const Mat& q, const Mat& k, const Mat& v, const std::vector<int>& rows, double scale,
                       const SimConfig& cfg) {
  const int d = q.cols, n = k.rows, dv = v.cols;
  // Q·Kᵀ side: smoothing, then quantization.
  Operands ops = prepare_operands(q, k, v, cfg);
  const Mat& ks = ops.ks;
  const Mat& qmean = ops.qmean;
  Mat& qh = ops.qh;
  Mat& kh = ops.kh;
  if (cfg.qk_fp8) {
    qh = quantize_e4m3(qh, cfg.gran, Role::q, cfg.q_block, cfg.q_amax);
    kh = quantize_e4m3(kh, cfg.gran, Role::k, kBlockQ, cfg.k_amax);
  } else if (cfg.qk_qmax > 0) {
    qh = quantize_int(qh, cfg.gran, Role::q, cfg.qk_qmax, cfg.q_block, cfg.q_amax).deq;
    kh = quantize_int(kh, cfg.gran, Role::k, cfg.qk_qmax, kBlockQ, cfg.k_amax).deq;
  }
  const Mat qmean_h = cfg.smooth_q && cfg.rotate ? rotate_rows(qmean, Role::q) : qmean;   // pairs with kh
  // P·V side.
  const std::vector<double>& vmean = ops.vmean;
  const Mat vh = quantize_v(ops.vs, cfg.v, cfg.v_amax);

  Mat out(static_cast<int>(rows.size()), dv);
  std::vector<double> s(static_cast<size_t>(n)), o(static_cast<size_t>(dv));
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    const int r = rows[ri];
    const int visible = cfg.causal ? std::clamp(r + n - q.rows + 1, 0, n) : n;
    for (int j = 0; j < visible; ++j) {
      double x = dot(qh.row(r), kh.row(j), d);
      if (cfg.smooth_q && !cfg.delta_s_from_codes) x += dot(qmean.row(r / cfg.q_block), ks.row(j), d);
      if (cfg.smooth_q && cfg.delta_s_from_codes) x += dot(qmean_h.row(r / cfg.q_block), kh.row(j), d);
      s[static_cast<size_t>(j)] = x * scale;
    }
    // FlashAttention-2 online softmax over key tiles; P is quantized against the running max, per tile.
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int t0 = 0; t0 < visible; t0 += cfg.block_kv) {
      const int t1 = std::min(visible, t0 + cfg.block_kv);
      double m_new = m;
      for (int j = t0; j < t1; ++j) m_new = std::max(m_new, s[static_cast<size_t>(j)]);
      const double alpha = std::exp(m - m_new);   // 0 on the first tile (m = -inf)
      l *= alpha;
      for (double& x : o) x *= alpha;
      for (int j = t0; j < t1; ++j) {
        const double p = std::exp(s[static_cast<size_t>(j)] - m_new);
        double ph = p;
        switch (cfg.p) {
          case PFormat::exact: break;
          case PFormat::int8_paper: ph = std::nearbyint(127 * p) / 127; break;
          case PFormat::fp16: ph = round_fp16(p); break;
          case PFormat::e4m3_scaled: ph = round_e4m3(448 * p) / 448; break;
          case PFormat::e4m3_unscaled: ph = round_e4m3(p); break;
        }
        l += cfg.p == PFormat::int8_paper ? ph : p;
        const double* vr = vh.row(j);
        for (int c = 0; c < dv; ++c) o[static_cast<size_t>(c)] += ph * vr[c];
      }
      m = m_new;
    }
    for (int c = 0; c < dv; ++c)
      out.at(static_cast<int>(ri), c) =
          l > 0 ? o[static_cast<size_t>(c)] / l + (cfg.smooth_v ? vmean[static_cast<size_t>(c)] : 0.0) : 0.0;
  }
  return out;
}

Mat softmax_scores(const Mat& q, const Mat& k, const std::vector<int>& rows, double scale) {
  Mat p(static_cast<int>(rows.size()), k.rows);
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < k.rows; ++j) {
      p.at(static_cast<int>(ri), j) = dot(q.row(rows[ri]), k.row(j), q.cols) * scale;
      mx = std::max(mx, p.at(static_cast<int>(ri), j));
    }
    double sum = 0;
    for (int j = 0; j < k.rows; ++j) sum += (p.at(static_cast<int>(ri), j) = std::exp(p.at(static_cast<int>(ri), j) - mx));
    for (int j = 0; j < k.rows; ++j) p.at(static_cast<int>(ri), j) /= sum;
  }
  return p;
}

Mat reference_attention(const Mat& q, const Mat& k, const Mat& v, const std::vector<int>& rows, double scale) {
  // One head of the shared float64 reference: a [rows][cols] matrix is a [1, 1, rows, cols] operand.
  auto operand = [](const Mat& m) { return reference::Operand::of(m.v.data(), {0, 0, m.cols, 1}); };
  const reference::Dims dims{1, 1, 1, q.rows, k.rows, q.cols, v.cols};
  std::vector<reference::RowId> ids;
  for (int r : rows) ids.push_back({0, 0, r});
  Mat out(static_cast<int>(rows.size()), v.cols);
  out.v = reference::attention_rows(operand(q), operand(k), operand(v), dims, {false, scale}, ids);
  return out;
}

Errors compare(const Mat& ref, const Mat& got) {
  if (ref.v.size() != got.v.size()) throw std::invalid_argument("compare: sizes differ");
  const reference::ErrorMetrics m = reference::compare(ref.v, got.v);
  Errors e;
  e.cosine = m.cosine;
  e.rel_l1 = m.rel_l1;
  e.rmse = m.rmse;
  // Elementwise relative error diverges where the reference crosses 0; elements below 1e-3 of the
  // reference's RMS are left out (a fraction of a percent of them on these inputs).
  double rr = 0;
  for (double a : ref.v) rr += a * a;
  const double n = static_cast<double>(std::max<size_t>(1, ref.v.size()));
  const double floor = 1e-3 * std::sqrt(rr / n);
  double mre = 0;
  long long counted = 0;
  for (size_t i = 0; i < ref.v.size(); ++i)
    if (std::fabs(ref.v[i]) >= floor && floor > 0) mre += std::fabs(got.v[i] - ref.v[i]) / std::fabs(ref.v[i]), ++counted;
  e.mre_elementwise = counted ? mre / counted : 0.0;
  return e;
}

Mat random_matrix(int rows, int d, Dist dist, const Outliers& o, std::uint64_t seed, std::uint64_t channel_seed) {
  std::mt19937_64 rng(seed), crng(channel_seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u(-0.5, 0.5), bias(o.bias_lo, o.bias_hi);
  std::vector<double> gain(static_cast<size_t>(d), 1.0), offset(static_cast<size_t>(d), 0.0);
  for (int c : o.scaled) gain[static_cast<size_t>(c % d)] = o.scale;
  for (int c : o.biased) offset[static_cast<size_t>(c % d)] = (crng() & 1 ? 1.0 : -1.0) * bias(crng);
  Mat x(rows, d);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c)
      x.at(r, c) = (dist == Dist::normal ? n01(rng) : u(rng)) * gain[static_cast<size_t>(c)] + offset[static_cast<size_t>(c)];
  return x;
}

void round_all_fp16(Mat& x) {
  for (double& v : x.v) v = round_fp16(v);
}

}  // namespace qattn::reference::sim
