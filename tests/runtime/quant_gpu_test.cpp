// The quantization kernels on the GPU against the float64 quantizer, code for code: every granularity
// (per_warp / per_thread with their Q and K mappings too),
// smoothing on and off, Q/K rows and transposed V, fp16 and bf16, both input layouts, odd lengths, head
// dims 64, 96 (the one with idle lanes), 128 and 256.
// Smoothing and per_channel scales run in both forms: with the statistics pass, and in one pass
// (head_sync.cuh), up to the largest head the one-pass form takes on this GPU. K smoothing with
// token-local scales also with its mean from a sample of the tokens (QuantProblem::mean_sample_tokens),
// against the float64 quantizer given the same sample. Rotated rows (rotate=hadamard: Q side and K side,
// K smoothed or not) at every token-local granularity and head dim.
// Outputs are poisoned first (-128 codes, NaN scales), so anything unwritten fails.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "generator/quant_plan.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/module.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/pass_cache.hpp"
#include "tests/common/quant_reference.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;

struct Request {
  Gran gran;
  int group;
  bool smooth, transpose;
  int rotate = quant::kRotateNone;
  Fmt code = Fmt::int8;   // int8 codes, or e4m3 (qk=fp8e4m3 rows)
};

const Request kRequests[] = {
    {Gran::per_token, 0, false, false}, {Gran::per_token, 0, true, false},   {Gran::per_block, 64, true, false},
    {Gran::per_block, 128, false, false}, {Gran::per_tensor, 0, false, false}, {Gran::per_tensor, 0, true, false},
    {Gran::per_channel, 0, false, true},  {Gran::per_tensor, 0, false, true},
};

class QuantVsReference : public test::GpuTest {
 protected:
  // Compiled once per kernel name for the device under test (tests/common/pass_cache.hpp).
  const rt::Kernel& pass(const gen::Source& src) { return passes_.get(src, kDevice); }
  // One request at one shape on the GPU against the float64 quantizer. per_warp / per_thread also check
  // that every row of a group holds the very same (expanded) scale.
  // resident_blocks: QuantProblem::resident_blocks (0: the statistics-pass form). mean_sample:
  // QuantProblem::mean_sample_tokens, and the reference's QuantConfig::mean_sample.
  void run_case(Fmt fmt, const Request& rq, int seq, Layout layout, int d, int resident_blocks = 0, int mean_sample = 0) {
    const int batch = 2, heads = 3;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(to_string(fmt)) + " d=" + std::to_string(d) + " " + to_string(rq.gran) + " group=" + std::to_string(rq.group) +
                 (rq.smooth ? " smooth" : "") + (rq.transpose ? " V^T" : "") + " rotate=" + std::to_string(rq.rotate) +
                 " code=" + to_string(rq.code) + " seq=" + std::to_string(seq) +
                 " resident_blocks=" + std::to_string(resident_blocks) + " mean_sample=" + std::to_string(mean_sample) +
                 " " + test::to_string(layout) + " " + test::seed_note(seed));
    HostTensor x = test::random_tensor({batch, heads, seq, d}, layout, test::k_like(), seed);
    test::round_to(x, fmt);
    gen::QuantRequest req{fmt, rq.gran, rq.group, rq.smooth, rq.transpose, d};
    req.rotate = rq.rotate;
    req.code = rq.code;
    const int pad = rq.transpose ? (seq + kVPadTokens - 1) / kVPadTokens * kVPadTokens : seq;
    const gen::QuantProblem prob{batch, heads, seq, pad, resident_blocks, mean_sample};
    const gen::QuantPlan plan = gen::plan_quant(req, prob);
    ASSERT_EQ(plan.launches.size() == 1 && plan.launches[0].min_blocks > 0, gen::quant_one_pass(req, prob));

    test::QuantRun run = test::prepare_quant_run(x, fmt, req, prob, plan, d);
    const QuantParams& qp = run.qp;
    ASSERT_EQ(gen::quant_params_error(req, qp), "");
    test::run_quant_plan(passes_, req, plan, qp, kDevice);
    const std::vector<std::int8_t> codes = run.y.to_vector<std::int8_t>();
    const std::vector<float> scales = run.scale.to_vector<float>();
    const std::vector<float> mean = run.mean.to_vector<float>();
    test::QuantizedView view;
    view.codes = codes.data();
    view.strides = test::Strides{qp.y.sb, qp.y.sh, qp.y.ss, qp.y.sc};
    view.seq_pad = pad;
    view.scales = scales.data();
    view.scale_sb = qp.scale.sb;
    view.scale_sh = qp.scale.sh;
    view.mean = rq.smooth ? mean.data() : nullptr;
    const bool fp8 = rq.code == Fmt::fp8e4m3;
    const test::QuantRef ref =
        test::quantize_reference(x, {rq.gran, rq.group, fp8 ? 448.0 : 127.0, rq.smooth, mean_sample, rq.rotate, fp8});
    const test::QuantCheck check = test::check_quantized(x, ref, view);
    EXPECT_TRUE(check.ok()) << check.report();
    if (rq.gran == Gran::per_warp || rq.gran == Gran::per_thread) {
      const test::QuantConfig cfg{rq.gran, rq.group, 127, rq.smooth};
      long long unequal = 0;
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
          std::map<int, float> group_scale;   // group index -> the scale of its first row
          for (int s = 0; s < seq; ++s) {
            const float got = scales[static_cast<size_t>(b * qp.scale.sb + h * qp.scale.sh + s)];
            const auto [it, first] = group_scale.emplace(test::fragment_group(cfg, s), got);
            unequal += !first && !(it->second == got);
          }
        }
      EXPECT_EQ(unequal, 0) << "rows of one group hold different scales";
    }
  }
  // The blocks the one-pass form may count on here (what the runtime passes).
  static int resident_blocks() { return quant::kOnePassMinBlocks * rt::query_device(kDevice).sm_count; }
  test::PassCache passes_;
};

TEST_F(QuantVsReference, EveryGranularitySmoothingAndLayout) {
  int cases = 0;
  for (Fmt fmt : {Fmt::fp16, Fmt::bf16})
    for (const Request& rq : kRequests)
      for (int seq : {1, 17, 63, 65, 1000, 4097})
        for (Layout layout : {Layout::bshd, Layout::bhsd})
        for (int d : {128, 96, 256, 64}) {
          // d 128, 96 and 256 on the short lengths; the long one at d 64 and 96 (the d with idle lanes).
          if (seq == 4097 ? (d != 64 && d != 96) : d == 64) continue;
          run_case(fmt, rq, seq, layout, d);
          ++cases;
          if (gen::quant_one_pass(gen::QuantRequest{fmt, rq.gran, rq.group, rq.smooth, rq.transpose, d},
                                    gen::QuantProblem{1, 1, seq, seq, resident_blocks()})) {
            run_case(fmt, rq, seq, layout, d, resident_blocks());
            ++cases;
          }
        }
  std::printf("[ quant   ] %d cases checked code for code\n", cases);
}

// per_warp / per_thread (Q mapping: group 32, K mapping: group 64), smoothing on and off, at lengths
// that cut groups (1, 31, 33, 65, 1000), every head dim, both layouts, fp16 and bf16.
TEST_F(QuantVsReference, FragmentGranularitiesRaggedLengths) {
  int cases = 0;
  for (Fmt fmt : {Fmt::fp16, Fmt::bf16})
    for (Gran gran : {Gran::per_warp, Gran::per_thread})
      for (int group : {32, 64})
        for (bool smooth : {false, true})
          for (int seq : {1, 31, 33, 65, 1000})
            for (Layout layout : {Layout::bshd, Layout::bhsd})
              for (int d : {64, 96, 128, 256}) {
                run_case(fmt, Request{gran, group, smooth, false}, seq, layout, d, smooth ? resident_blocks() : 0);
                ++cases;
              }
  std::printf("[ quant   ] %d per_warp / per_thread cases checked code for code\n", cases);
}

// The one-pass form at the largest head it takes on this GPU (a head's tiles = half the resident blocks),
// six heads, so that heads wait for their tiles while later heads start: K rows (per_token, smooth) and
// V^T (per_channel, smooth), against the statistics-pass form's float64 check.
TEST_F(QuantVsReference, OnePassAtTheLargestHead) {
  const int resident = resident_blocks();
  const int rows_seq = resident / 2 * quant::kRowTileTokens;
  const int vt_seq = resident / 2 * quant::kTransposeTileTokens;
  const gen::QuantRequest k_req{Fmt::fp16, Gran::per_token, 0, true, false, 128};
  const gen::QuantRequest v_req{Fmt::fp16, Gran::per_channel, 0, true, true, 128};
  ASSERT_TRUE(gen::quant_one_pass(k_req, gen::QuantProblem{2, 3, rows_seq, rows_seq, resident}));
  ASSERT_FALSE(gen::quant_one_pass(k_req, gen::QuantProblem{2, 3, rows_seq + 1, rows_seq + 1, resident}));
  ASSERT_TRUE(gen::quant_one_pass(v_req, gen::QuantProblem{2, 3, vt_seq, vt_seq, resident}));
  run_case(Fmt::fp16, Request{Gran::per_token, 0, true, false}, rows_seq, Layout::bshd, 128, resident);
  run_case(Fmt::bf16, Request{Gran::per_channel, 0, true, true}, vt_seq, Layout::bhsd, 128, resident);
  run_case(Fmt::fp16, Request{Gran::per_channel, 0, false, true}, vt_seq - 1, Layout::bshd, 128, resident);
}

// K smoothing with token-local scales, the mean from a strided sample of the tokens: every K
// granularity and group, fp16 and bf16, both layouts; a stride just above one token (1024 of 1025
// keys), a sample the statistics chunks do not divide (777 of 5000: 512 + 265 rows), a single token
// (1 of 300), and the runtime's default on a long head (1024 of 4097, every head dim; the others at
// d 96 and 128). The bhsd cases pass the resident blocks that enable the one-pass form, which the
// sample must override. At seq_len <= the sample (1000 keys, sample 1024) the plan is the one without it.
TEST_F(QuantVsReference, KMeanFromASampleOfTheTokens) {
  const Request k_requests[] = {{Gran::per_token, 0, true, false}, {Gran::per_block, 64, true, false},
                                {Gran::per_block, 128, true, false}, {Gran::per_warp, 64, true, false},
                                {Gran::per_thread, 64, true, false}};
  struct Length {
    int seq, sample;
  };
  const Length lengths[] = {{1025, 1024}, {5000, 777}, {300, 1}, {4097, 1024}, {1000, 1024}};
  int cases = 0;
  for (Fmt fmt : {Fmt::fp16, Fmt::bf16})
    for (const Request& rq : k_requests)
      for (const Length& n : lengths)
        for (Layout layout : {Layout::bshd, Layout::bhsd})
          for (int d : {64, 96, 128, 256}) {
            // Every head dim at the default sample on the long head; the other lengths at d 96 and 128.
            if (n.seq != 4097 && d != 96 && d != 128) continue;
            const gen::QuantRequest req{fmt, rq.gran, rq.group, rq.smooth, rq.transpose, d};
            const int resident = layout == Layout::bhsd ? resident_blocks() : 0;
            const gen::QuantProblem prob{1, 1, n.seq, n.seq, resident, n.sample};
            ASSERT_EQ(gen::quant_samples_mean(req, prob), n.seq > n.sample);
            run_case(fmt, rq, n.seq, layout, d, resident, n.sample);
            ++cases;
          }
  std::printf("[ quant   ] %d sampled-mean cases checked code for code\n", cases);
}

// rotate=hadamard: Q-side rows (H S x) and K-side rows (H S x / B, smoothed or not, the mean in one pass,
// from the statistics pass or from a sample) against the float64 rotation, code for code, at every
// token-local granularity with its Q or K group and every head dim (96: blocks of 32 over 12 of 16
// lanes; 256: a block across the whole warp); lengths and layouts taken in turn.
TEST_F(QuantVsReference, RotatedRowsEveryGranularityAndHeadDim) {
  struct Side {
    int rotate;
    bool smooth;
    int resident, sample;   // K's forms: statistics pass, one pass, sampled mean
  };
  const Side sides[] = {{quant::kRotateQ, false, 0, 0}, {quant::kRotateK, false, 0, 0}, {quant::kRotateK, true, 0, 0},
                        {quant::kRotateK, true, -1, 0}, {quant::kRotateK, true, 0, 256}};
  const int seqs[] = {1, 65, 1000, 33};
  int cases = 0, turn = 0;
  for (int d : {64, 96, 128, 256})
    for (Gran gran : {Gran::per_token, Gran::per_block, Gran::per_warp, Gran::per_thread})
      for (const Side& side : sides) {
        const bool k_side = side.rotate == quant::kRotateK;
        const int group = gran == Gran::per_token ? 0 : gran == Gran::per_block || k_side ? 64 : 32;
        const Fmt fmt = turn % 5 == 4 ? Fmt::bf16 : Fmt::fp16;
        const int seq = side.sample ? 1000 : seqs[turn % 4];
        const Layout layout = turn % 2 ? Layout::bhsd : Layout::bshd;
        ++turn;
        run_case(fmt, Request{gran, group, side.smooth, false, side.rotate}, seq, layout, d,
                 side.resident < 0 ? resident_blocks() : 0, side.sample);
        ++cases;
      }
  std::printf("[ quant   ] %d rotated cases checked code for code\n", cases);
}

// qk=fp8e4m3's rows: e4m3 codes of every row granularity the attention spec takes (per_token, per_block
// 64, per_tensor, and per_warp / per_thread in the Q and K mappings), smoothing on and off, the one-pass
// and sampled-mean forms, a rotated Q and K, ragged lengths, every head dim and both input types, against
// the float64 encoder (qattn/decode/fp8_e4m3.h), code for code.
TEST_F(QuantVsReference, Fp8RowsEveryGranularity) {
  struct Form {
    Gran gran;
    int group;
    bool smooth;
    int rotate, resident, sample;
  };
  const Form forms[] = {{Gran::per_token, 0, false, quant::kRotateNone, 0, 0}, {Gran::per_token, 0, true, quant::kRotateNone, 0, 0},
                        {Gran::per_block, 64, true, quant::kRotateNone, 0, 0}, {Gran::per_tensor, 0, false, quant::kRotateNone, 0, 0},
                        {Gran::per_tensor, 0, true, quant::kRotateNone, 0, 0}, {Gran::per_warp, 32, false, quant::kRotateNone, 0, 0},
                        {Gran::per_thread, 64, true, quant::kRotateNone, 0, 0}, {Gran::per_token, 0, true, quant::kRotateNone, -1, 0},
                        {Gran::per_token, 0, true, quant::kRotateNone, 0, 256}, {Gran::per_token, 0, false, quant::kRotateQ, 0, 0},
                        {Gran::per_block, 64, true, quant::kRotateK, 0, 0}};
  const int seqs[] = {1, 65, 1000, 33, 4097};
  int cases = 0, turn = 0;
  for (int d : {64, 96, 128, 256})
    for (const Form& f : forms) {
      const Fmt fmt = turn % 3 == 2 ? Fmt::bf16 : Fmt::fp16;
      const int seq = f.sample ? 1000 : seqs[turn % 5];
      const Layout layout = turn % 2 ? Layout::bhsd : Layout::bshd;
      ++turn;
      run_case(fmt, Request{f.gran, f.group, f.smooth, false, f.rotate, Fmt::fp8e4m3}, seq, layout, d,
               f.resident < 0 ? resident_blocks() : 0, f.sample);
      ++cases;
    }
  std::printf("[ quant   ] %d e4m3 row cases checked code for code\n", cases);
}

}  // namespace
}  // namespace qattn
