#include "tests/common/score_error.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "qattn/decode/fp8_e4m3.h"
#include "qattn/quant/quant_config.h"
#include "tests/common/qsmooth_reference.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/reference_attention.hpp"

namespace qattn {
namespace test {

namespace {

// e4m3 codes: the step to the other neighbour where x / scale = t lies within fp32 rounding of the midpoint
// between two e4m3 values (the kernels form t in fp32, the reference in float64, so either code may come
// out); 0 elsewhere. In code units.
double e4m3_tie_step(double t) {
  const double w = fp8::decode_e4m3(fp8::encode_e4m3(static_cast<float>(t)));
  const double step = e4m3_step(std::fabs(w));
  const double from_mid = std::fabs(std::fabs(t - w) - step / 2);
  return from_mid <= 1e-6 * std::max(std::fabs(t), 1.0) ? step : 0.0;
}

}  // namespace

std::vector<double> score_error_bound(const HostTensor& q, const HostTensor& k, Gran gran, int group, bool smooth_k,
                                      bool causal, double qmax, bool smooth_q, int k_mean_sample, bool rotate, bool fp8) {
  if (fp8) qmax = 448;
  // per_warp / per_thread: Q and K take their own mappings (group 32 and 64); `group` is ignored.
  const bool fragment = gran == Gran::per_warp || gran == Gran::per_thread;
  const std::vector<double> q_means = smooth_q ? q_block_means(q) : std::vector<double>();
  const int rot_q = rotate ? quant::kRotateQ : quant::kRotateNone, rot_k = rotate ? quant::kRotateK : quant::kRotateNone;
  const HostTensor q_in = smooth_q ? subtract_q_block_means(q, q_means) : q;   // what Q's quantizer sees
  const QuantRef qr = quantize_reference(q_in, {gran, fragment ? 32 : group, qmax, false, 0, rot_q, fp8});
  // The block means as the kernel reads them: rotated like the rows they came from.
  std::vector<double> q_means_seen = q_means;
  if (rotate)
    for (size_t at = 0; at < q_means_seen.size(); at += static_cast<size_t>(q.shape.dim))
      quant::rotate_row_reference(&q_means_seen[at], q.shape.dim, rot_q);
  // The runtime samples K's mean only for token-local scales (generator/quant_plan.hpp, quant_samples_mean);
  // per_tensor and per_channel K keep the mean over every key.
  const int sample = quant::token_local_gran(gran) ? k_mean_sample : 0;
  const QuantRef kr = quantize_reference(k, {gran, fragment ? 64 : group, qmax, smooth_k, sample, rot_k, fp8});
  const int B = q.shape.batch, HQ = q.shape.heads, HK = k.shape.heads, QL = q.shape.seq, KL = k.shape.seq;
  const int D = q.shape.dim, G = HQ / HK;
  // Dense [b][h][s][c] copies: exact q, dequantized q̂, exact k - mean, dequantized k̂ without the mean
  // (q̂ and k̂ rotated when rotating: their dot products are the unrotated ones).
  std::vector<double> qx(static_cast<size_t>(B) * HQ * QL * D), qh(qx.size()), q_tie(qx.size(), 0.0);
  std::vector<double> kx(static_cast<size_t>(B) * HK * KL * D), kh(kx.size()), k_tie(fp8 ? kx.size() : 0, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < QL; ++i) {
        MeanCodes mean;   // the block mean as the kernel multiplies it (smooth_q)
        if (smooth_q)
          mean = quantize_mean(&q_means_seen[((static_cast<size_t>(b) * HQ + h) * q_mean_blocks(QL) + i / kQMeanBlock) * D], D);
        for (int c = 0; c < D; ++c) {
          const size_t at = ((static_cast<size_t>(b) * HQ + h) * QL + i) * D + c;
          qx[at] = q.at(b, h, i, c);
          qh[at] = qr.value(b, h, i, c) + (smooth_q ? mean.value(c) : 0.0);
          // An exact tie (fp16 inputs make them: x = 1.4375 with a group abs-max of 20.125 and qmax 7 is
          // x / scale = 0.5) goes to the even code here; the fused-Q kernel rounds x · fp32(qmax / amax),
          // whose rounded factor can put it just past the tie, to the other code. Both codes are scale / 2
          // from x, so either is a correct quantization: allow the other one (its scale, times |k̂|).
          const double sq = qr.scale(b, h, i, c);
          if (!rotate && fp8 && sq > 0) q_tie[at] = e4m3_tie_step(q_in.at(b, h, i, c) / sq) * sq;
          if (!rotate && !fp8 && sq > 0) {
            const double t = q_in.at(b, h, i, c) / sq;
            if (std::fabs(std::fabs(t - qr.code(b, h, i, c)) - 0.5) <= 1e-6 * std::max(1.0, std::fabs(t))) q_tie[at] = sq;
          }
        }
      }
    for (int h = 0; h < HK; ++h)
      for (int j = 0; j < KL; ++j)
        for (int c = 0; c < D; ++c) {
          const size_t at = ((static_cast<size_t>(b) * HK + h) * KL + j) * D + c;
          kx[at] = k.at(b, h, j, c) - kr.mean_at(b, h, c);
          kh[at] = kr.value(b, h, j, c);
          const double sk = kr.scale(b, h, j, c);
          if (fp8 && !rotate && sk > 0) k_tie[at] = e4m3_tie_step(kx[at] / sk) * sk;
        }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> bound(static_cast<size_t>(B) * HQ * QL, 0.0);
  std::atomic<long long> next{0};
  auto work = [&] {
    for (long long row = next++; row < static_cast<long long>(bound.size()); row = next++) {
      const int i = static_cast<int>(row % QL), h = static_cast<int>(row / QL % HQ), b = static_cast<int>(row / QL / HQ);
      const double* qa = &qx[static_cast<size_t>(row) * D];
      const double* qb = &qh[static_cast<size_t>(row) * D];
      const double* qt = &q_tie[static_cast<size_t>(row) * D];
      const long long visible = std::min<long long>(visible_keys(i, QL, KL, causal), KL);
      double worst = 0;
      for (long long j = 0; j < visible; ++j) {
        const size_t kat = ((static_cast<size_t>(b) * HK + h / G) * KL + j) * D;
        double err = 0, tie = 0;
        for (int c = 0; c < D; ++c) {
          err += qb[c] * kh[kat + c] - qa[c] * kx[kat + c];
          tie += qt[c] * std::fabs(kh[kat + c]);
          if (fp8) tie += k_tie[kat + c] * std::fabs(qb[c]);
        }
        worst = std::max(worst, (std::fabs(err) + tie) * scale);
      }
      bound[static_cast<size_t>(row)] = worst;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return bound;
}

}  // namespace test
}  // namespace qattn
