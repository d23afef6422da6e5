// Variable-length (packed, ragged) input on the GPU: the quantization passes with QuantParams::cu_seqlens
// and the LSE correction with LseCorrectionParams::cu_q.
// Quantizers: sequences of 1, 15, 16, 17, 130 and 257 tokens (one token, lengths on both sides of a
// multiple of 16, the longest) packed into one tensor, quantized with cu_seqlens, must hold in each
// sequence's slot of the dense outputs exactly what the very same passes write for that sequence alone
// (batch 1, seq_len = its length, the same seq_pad): code for code, scale for scale, mean for mean, codes 0
// past its length, no scale there (the NaN poison stays), block means 0 past its blocks. per_tensor
// (one abs-max over every sequence): the scale is the largest of the sequences' own, and the codes are
// those of each sequence's quantizing pass run again with that abs-max.
// LSE correction: RowDot and AddScaled on packed Q rows and lse [total_q, heads_q] against a float64 host
// computation, and RowDot's dots against its dense run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "generator/quant_plan.hpp"
#include "generator/render_helpers.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/pass_cache.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;

const std::vector<int> kLengths = {1, 15, 16, 17, 130, 257};

std::vector<int> offsets_of(const std::vector<int>& lens) {
  std::vector<int> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  return cu;
}

// Sequence b of `seqs` ([batch, heads, longest, d], valid up to lens[b]) alone, as a dense tensor.
HostTensor sequence_alone(const HostTensor& seqs, int b, int len) {
  HostTensor one = HostTensor::zeros({1, seqs.shape.heads, len, seqs.shape.dim});
  for (int h = 0; h < seqs.shape.heads; ++h)
    for (int s = 0; s < len; ++s)
      for (int c = 0; c < seqs.shape.dim; ++c) one.at(0, h, s, c) = seqs.at(b, h, s, c);
  return one;
}

// Every sequence's valid rows packed one after another: [1, heads, total, d] in `layout`.
HostTensor packed(const HostTensor& seqs, const std::vector<int>& cu, Layout layout) {
  HostTensor x = HostTensor::zeros({1, seqs.shape.heads, cu.back(), seqs.shape.dim}, layout);
  for (int b = 0; b + 1 < static_cast<int>(cu.size()); ++b)
    for (int h = 0; h < seqs.shape.heads; ++h)
      for (int s = 0; s < cu[b + 1] - cu[b]; ++s)
        for (int c = 0; c < seqs.shape.dim; ++c) x.at(0, h, cu[b] + s, c) = seqs.at(b, h, s, c);
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

struct Request {
  Gran gran;
  int group;
  bool smooth, transpose;
  bool block_mean = false;
  int rotate = quant::kRotateNone;
  bool pack4 = false;   // int4 codes packed two per byte (qmax 7)
};

// quant_gpu_test.cpp's requests, then Q smoothing (block means, token-wise and per_tensor), the
// fragment granularities, per_channel rows and smoothed V^T, rotated rows, and packed int4 rows.
const Request kRequests[] = {
    {Gran::per_token, 0, false, false},
    {Gran::per_token, 0, true, false},
    {Gran::per_block, 64, true, false},
    {Gran::per_block, 128, false, false},
    {Gran::per_tensor, 0, false, false},
    {Gran::per_tensor, 0, true, false},
    {Gran::per_channel, 0, false, true},
    {Gran::per_tensor, 0, false, true},
    {Gran::per_warp, 32, false, false, true},                     // Q: block means
    {Gran::per_tensor, 0, false, false, true},                    // Q: block means, per_tensor (BlockMeanAmax)
    {Gran::per_thread, 64, true, false},                          // K
    {Gran::per_channel, 0, false, false},                         // per_channel rows
    {Gran::per_channel, 0, true, true},                           // V^T smoothed
    {Gran::per_token, 0, false, false, true, quant::kRotateQ},    // Q: block means, rotated
    {Gran::per_block, 64, true, false, false, quant::kRotateK},   // K: smoothed, rotated
    {Gran::per_block, 64, true, false, false, quant::kRotateNone, true},   // K: int4, smoothed
    {Gran::per_warp, 32, false, false, false, quant::kRotateNone, true},   // Q: int4
};

gen::QuantRequest request_of(Fmt fmt, const Request& rq, int d) {
  gen::QuantRequest req{fmt, rq.gran, rq.group, rq.smooth, rq.transpose, d};
  req.block_mean = rq.block_mean;
  req.rotate = rq.rotate;
  req.pack4 = rq.pack4;
  req.qmax = rq.pack4 ? 7 : 127;
  return req;
}

// Mismatches of one comparison, and the first of them (what() is called for that one only).
struct Diff {
  long long count = 0;
  std::string first;
  template <class What>
  void add(bool bad, What&& what) {
    if (bad && count++ == 0) first = what();
  }
};

class QuantVarlen : public test::GpuTest {
 protected:
  // The plan's launches with the grids of one sequence of `len` tokens: the plan was made for batch 1
  // and the longest sequence, so only the passes whose grid follows seq_len change (sample: the plan's).
  static gen::QuantPlan for_one_sequence(gen::QuantPlan plan, int len, int sample) {
    for (gen::QuantLaunch& l : plan.launches) {
      const int tokens = quant::stats_tokens(len, sample);
      if (l.tag.rfind("channel_stats", 0) == 0 || l.tag == "tensor_amax")
        l.grid[0] = static_cast<unsigned>(quant::stats_splits(tokens, quant::stats_chunk_tokens(sample)));
      if (l.tag == "block_mean_amax")
        l.grid[0] = static_cast<unsigned>((len + quant::kRowTileTokens - 1) / quant::kRowTileTokens);
    }
    return plan;
  }

  void run_case(Fmt fmt, const Request& rq, int d, Layout layout, int resident, int sample) {
    const std::vector<int> cu = offsets_of(kLengths);
    const int batch = static_cast<int>(kLengths.size()), heads = 3;
    const int longest = *std::max_element(kLengths.begin(), kLengths.end());
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(to_string(fmt)) + " d=" + std::to_string(d) + " " + to_string(rq.gran) + " group=" +
                 std::to_string(rq.group) + (rq.smooth ? " smooth" : "") + (rq.transpose ? " V^T" : "") +
                 (rq.block_mean ? " block_mean" : "") + (rq.pack4 ? " int4" : "") + " rotate=" +
                 std::to_string(rq.rotate) + " resident_blocks=" + std::to_string(resident) + " mean_sample=" +
                 std::to_string(sample) + " packed " + test::to_string(layout) + " " + test::seed_note(seed));
    HostTensor seqs = test::random_tensor({batch, heads, longest, d}, Layout::bhsd, test::k_like(), seed);
    test::round_to(seqs, fmt);
    const gen::QuantRequest req = request_of(fmt, rq, d);
    const int tile = rq.transpose ? kVPadTokens : quant::kRowTileTokens;
    const int pad = (longest + tile - 1) / tile * tile;
    const int row_bytes = rq.pack4 ? d / 2 : d;

    // Packed, with cu_seqlens.
    const gen::QuantProblem prob{batch, heads, longest, pad, resident, sample};
    const gen::QuantPlan plan = gen::plan_quant(req, prob);
    test::QuantRun var = test::prepare_quant_run(packed(seqs, cu, layout), fmt, req, prob, plan, row_bytes);
    const rt::DeviceBuffer cu_dev = rt::DeviceBuffer::from(cu);
    var.qp.x.sb = 0;   // unused with cu_seqlens
    var.qp.cu_seqlens = cu_dev.as<const int>();
    ASSERT_EQ(gen::quant_params_error(req, var.qp), "");
    test::run_quant_plan(passes_, req, plan, var.qp, kDevice);

    // Each sequence alone, through the same passes.
    const gen::QuantPlan alone = gen::plan_quant(req, gen::QuantProblem{1, heads, longest, pad, resident, sample});
    ASSERT_EQ(alone.launches.size(), plan.launches.size());
    for (size_t i = 0; i < plan.launches.size(); ++i) ASSERT_EQ(alone.launches[i].pass, plan.launches[i].pass);
    const int plan_sample = gen::quant_samples_mean(req, prob) ? sample : 0;
    std::vector<test::QuantRun> ones;
    std::vector<gen::QuantPlan> one_plans;
    for (int b = 0; b < batch; ++b) {
      const gen::QuantProblem one{1, heads, kLengths[b], pad, resident, sample};
      one_plans.push_back(for_one_sequence(alone, kLengths[b], plan_sample));
      ones.push_back(test::prepare_quant_run(sequence_alone(seqs, b, kLengths[b]), fmt, req, one, alone, row_bytes));
      ASSERT_EQ(gen::quant_params_error(req, ones.back().qp), "");
      test::run_quant_plan(passes_, req, one_plans.back(), ones.back().qp, kDevice);
    }

    Diff codes, scales, means;
    const std::vector<float> var_scales = var.scale.to_vector<float>(), var_mean = var.mean.to_vector<float>();
    if (rq.gran == Gran::per_tensor) {
      // One abs-max over every sequence: the largest of theirs. The single-sequence quantizing pass runs
      // again with it, so that its codes are the packed run's.
      float amax = 0.f, scale = 0.f;
      for (const test::QuantRun& one : ones) {
        amax = std::max(amax, one.scratch.to_vector<float>()[0]);
        scale = std::max(scale, one.scale.to_vector<float>()[0]);
      }
      scales.add(!same_bits(var.scratch.to_vector<float>()[0], amax), [&] { return "packed abs-max"; });
      scales.add(!same_bits(var_scales[0], scale),
                 [&] { return "per_tensor scale " + std::to_string(var_scales[0]) + " vs " + std::to_string(scale); });
      for (int b = 0; b < batch; ++b) {
        ones[b].scratch.upload(&amax, sizeof(float));
        gen::QuantPlan last = one_plans[b];
        last.launches.erase(last.launches.begin(), last.launches.end() - 1);
        test::run_quant_plan(passes_, req, last, ones[b].qp, kDevice);
      }
    }
    const std::vector<std::int8_t> got = var.y.to_vector<std::int8_t>();
    for (int b = 0; b < batch; ++b) {
      const test::QuantRun& one = ones[b];
      const int len = kLengths[b];
      const std::string at = "sequence " + std::to_string(b) + " (" + std::to_string(len) + " tokens)";
      // Codes: the whole padded slot; y has the same per-head layout in both runs.
      const std::vector<std::int8_t> want = one.y.to_vector<std::int8_t>();
      const long long slot = var.qp.y.sb;
      for (long long i = 0; i < slot; ++i) {
        const std::int8_t g = got[static_cast<size_t>(b * slot + i)], w = want[static_cast<size_t>(i)];
        codes.add(g != w || g == test::kInt8Poison, [&] {
          return at + ": code " + std::to_string(g) + " vs " + std::to_string(w) + " at byte " + std::to_string(i);
        });
      }
      // Scales (per_tensor: above), and none past the sequence.
      const std::vector<float> one_scales = one.scale.to_vector<float>();
      const int per_head_var = static_cast<int>(var.qp.scale.sh), per_head_one = static_cast<int>(one.qp.scale.sh);
      for (int h = 0; h < heads && rq.gran != Gran::per_tensor; ++h)
        for (int i = 0; i < per_head_var; ++i) {
          const float g = var_scales[static_cast<size_t>(b * var.qp.scale.sb + h * per_head_var + i)];
          if (i >= per_head_one) {
            scales.add(!std::isnan(g), [&] { return at + ": a scale written past its end, index " + std::to_string(i); });
            continue;
          }
          const float w = one_scales[static_cast<size_t>(h * per_head_one + i)];
          scales.add(!same_bits(g, w) || std::isnan(g), [&] {
            return at + ": scale " + std::to_string(i) + " of head " + std::to_string(h) + ": " + std::to_string(g) +
                   " vs " + std::to_string(w);
          });
        }
      // Means: [heads][d] (smooth) or [heads][blocks][d] (block means; 0 past the sequence's blocks).
      const std::vector<float> one_mean = one.mean.to_vector<float>();
      const int blocks_var = rq.block_mean ? (longest + kQMeanBlock - 1) / kQMeanBlock : 1;
      const int blocks_one = rq.block_mean ? (len + kQMeanBlock - 1) / kQMeanBlock : 1;
      for (int h = 0; h < heads && (rq.smooth || rq.block_mean); ++h)
        for (int k = 0; k < blocks_var; ++k)
          for (int c = 0; c < d; ++c) {
            const float g = var_mean[static_cast<size_t>(((b * heads + h) * blocks_var + k) * d + c)];
            const float w = k < blocks_one ? one_mean[static_cast<size_t>((h * blocks_one + k) * d + c)] : 0.f;
            const bool bad = k < blocks_one ? !same_bits(g, w) || std::isnan(g) : g != 0.f;   // +-0 past the end
            means.add(bad, [&] {
              return at + ": mean of head " + std::to_string(h) + " block " + std::to_string(k) + " channel " +
                     std::to_string(c) + ": " + std::to_string(g) + " vs " + std::to_string(w);
            });
          }
    }
    EXPECT_EQ(codes.count, 0) << codes.first;
    EXPECT_EQ(scales.count, 0) << scales.first;
    EXPECT_EQ(means.count, 0) << means.first;
  }

  static int resident_blocks() { return quant::kOnePassMinBlocks * rt::query_device(kDevice).sm_count; }
  test::PassCache passes_;
};

// Every request at d 64 and 128 in fp16 and bf16 (d 96 and 256 in fp16), packed rows in both layouts
// ([total, heads, d] and [heads, total, d]) taken in turn; each with the statistics pass, in one pass
// where the plan takes it, and K smoothing with token-local scales also with its mean from a sample of
// 100 tokens (the two longest sequences sampled, the others read whole).
TEST_F(QuantVarlen, EqualsEachSequenceAlone) {
  int cases = 0, turn = 0;
  for (int d : {64, 128, 96, 256})
    for (Fmt fmt : {Fmt::fp16, Fmt::bf16}) {
      if ((d == 96 || d == 256) && fmt == Fmt::bf16) continue;
      for (const Request& rq : kRequests) {
        const Layout layout = turn++ % 2 ? Layout::bhsd : Layout::bshd;
        const gen::QuantRequest req = request_of(fmt, rq, d);
        const int tile = rq.transpose ? kVPadTokens : quant::kRowTileTokens;
        const gen::QuantProblem prob{static_cast<int>(kLengths.size()), 3, 257, (257 + tile - 1) / tile * tile,
                                     resident_blocks()};
        run_case(fmt, rq, d, layout, 0, 0);
        ++cases;
        if (gen::quant_one_pass(req, prob)) {
          run_case(fmt, rq, d, layout, resident_blocks(), 0);
          ++cases;
        }
        if (rq.smooth && quant::token_local_gran(rq.gran)) {
          run_case(fmt, rq, d, layout, 0, 100);
          ++cases;
        }
      }
    }
  std::printf("[ quant   ] %d packed variable-length cases checked against each sequence alone\n", cases);
}

// LSE correction with cu_q: q packed [total_q, heads_q, d], lse [total_q, heads_q], GQA 2.
class LseCorrectionVarlen : public test::GpuTest {
 protected:
  test::PassCache passes_;
};

TEST_F(LseCorrectionVarlen, RowDotAndAddScaledReadPackedRows) {
  const std::vector<int> cu = offsets_of(kLengths);
  const int batch = static_cast<int>(kLengths.size()), heads_q = 4, heads_kv = 2, longest = 257, total = cu.back();
  const Arch arch = parse_arch(rt::arch_for(rt::query_device(kDevice)));
  for (Fmt fmt : {Fmt::fp16, Fmt::bf16})
    for (int d : {64, 128, 256}) {
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(std::string(to_string(fmt)) + " d=" + std::to_string(d) + " " + test::seed_note(seed));
      HostTensor q = test::random_tensor({batch, heads_q, longest, d}, Layout::bhsd, test::q_like(), seed);
      test::round_to(q, fmt);
      const HostTensor q_packed = packed(q, cu, Layout::bshd);
      std::mt19937_64 rng(seed + 1);
      std::normal_distribution<float> normal(0.f, 3.f);
      std::vector<float> k_mean(static_cast<size_t>(batch * heads_kv * d)), lse0(static_cast<size_t>(total * heads_q));
      for (float& m : k_mean) m = normal(rng);
      for (float& l : lse0) l = normal(rng);
      lse0[5] = -INFINITY;   // a fully masked row stays at -inf
      std::vector<float> dot_poison(static_cast<size_t>(batch * heads_q * longest));
      test::fill_nan(dot_poison);

      Spec spec;
      spec.out = fmt;
      spec.head_dim = d;
      spec.arch = arch;
      const rt::Kernel& row_dot = passes_.get(gen::render_lse_rowdot(spec), kDevice);
      const rt::Kernel& add = passes_.get(gen::render_lse_addscaled(arch), kDevice);
      const rt::DeviceBuffer q_dev = rt::DeviceBuffer::from(test::encode(q_packed, fmt)),
                             q_dense = rt::DeviceBuffer::from(test::encode(q, fmt)),
                             mean_dev = rt::DeviceBuffer::from(k_mean), cu_dev = rt::DeviceBuffer::from(cu),
                             dot_dev = rt::DeviceBuffer::from(dot_poison), dense_dot = rt::DeviceBuffer::from(dot_poison),
                             lse_dev = rt::DeviceBuffer::from(lse0);
      LseCorrectionParams fix{};
      fix.q = TensorRef{q_dev.as<void>(), 0, q_packed.strides.sh, q_packed.strides.ss, 1};
      fix.k_mean = mean_dev.as<const float>();
      fix.dot = dot_dev.as<float>();
      fix.lse = lse_dev.as<float>();
      fix.batch = batch;
      fix.heads_q = heads_q;
      fix.heads_kv = heads_kv;
      fix.q_len = longest;
      fix.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
      fix.cu_q = cu_dev.as<const int>();
      const rt::Dim3 dot_grid{static_cast<unsigned>((longest + 3) / 4), static_cast<unsigned>(heads_q),
                              static_cast<unsigned>(batch)};
      row_dot.launch(dot_grid, rt::Dim3{128, 1, 1}, 0, nullptr, fix);
      const long long rows = 1LL * batch * heads_q * longest;
      add.launch(rt::Dim3{static_cast<unsigned>((rows + 255) / 256), 1, 1}, rt::Dim3{256, 1, 1}, 0, nullptr, fix);
      LseCorrectionParams dense = fix;   // the same rows, read from the dense [b, h, s, d] Q
      dense.q = TensorRef{q_dense.as<void>(), q.strides.sb, q.strides.sh, q.strides.ss, 1};
      dense.dot = dense_dot.as<float>();
      dense.cu_q = nullptr;
      row_dot.launch(dot_grid, rt::Dim3{128, 1, 1}, 0, nullptr, dense);
      rt::synchronize_device(kDevice);

      const std::vector<float> dot = dot_dev.to_vector<float>(), dot_d = dense_dot.to_vector<float>(),
                               lse = lse_dev.to_vector<float>();
      Diff dots, lses;
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads_q; ++h)
          for (int i = 0; i < longest; ++i) {
            const size_t at = static_cast<size_t>((b * heads_q + h) * longest + i);
            const std::string where = "b=" + std::to_string(b) + " h=" + std::to_string(h) + " row " + std::to_string(i);
            if (i >= kLengths[b]) {
              dots.add(!same_bits(dot[at], 0.f), [&] { return where + ": dot " + std::to_string(dot[at]) + " past the end"; });
              continue;
            }
            double want = 0, magnitude = 0;
            for (int c = 0; c < d; ++c) {
              const double t = q.at(b, h, i, c) * k_mean[static_cast<size_t>((b * heads_kv + h / 2) * d + c)];
              want += t;
              magnitude += std::fabs(t);
            }
            dots.add(!(std::fabs(dot[at] - want) <= 1e-5 * magnitude + 1e-30),
                     [&] { return where + ": dot " + std::to_string(dot[at]) + " vs " + std::to_string(want); });
            dots.add(!same_bits(dot[at], dot_d[at]), [&] { return where + ": packed dot differs from the dense run's"; });
            const size_t l = static_cast<size_t>((cu[b] + i) * heads_q + h);
            const double lse_want = lse0[l] + static_cast<double>(fix.softmax_scale) * dot[at];
            const bool ok = std::isinf(lse0[l]) ? lse[l] == lse0[l]
                                                : std::fabs(lse[l] - lse_want) <= 1e-6 * (std::fabs(lse_want) + 1.0);
            lses.add(!ok, [&] { return where + ": lse " + std::to_string(lse[l]) + " vs " + std::to_string(lse_want); });
          }
      EXPECT_EQ(dots.count, 0) << dots.first;
      EXPECT_EQ(lses.count, 0) << lses.first;
    }
}

}  // namespace
}  // namespace qattn
