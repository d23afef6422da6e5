// The launch plan of the quantization passes: which passes, in which order, with which grids.
#include <gtest/gtest.h>

#include "generator/quant_plan.hpp"
#include "generator/template_args.hpp"

namespace qattn::gen {
namespace {

// The constants and helpers shared with the device passes (qattn/quant/quant_config.h).
using namespace quant;

QuantRequest request(Gran gran, int group, bool smooth, bool transpose, Fmt in = Fmt::fp16, int d = 128) {
  QuantRequest r;
  r.in = in;
  r.gran = gran;
  r.group = group;
  r.smooth = smooth;
  r.transpose = transpose;
  r.d = d;
  return r;
}

void expect_grid(const QuantLaunch& l, unsigned x, unsigned y, unsigned z) {
  EXPECT_EQ(l.grid[0], x) << l.pass;
  EXPECT_EQ(l.grid[1], y) << l.pass;
  EXPECT_EQ(l.grid[2], z) << l.pass;
}

// Valid parameters of the transposing V pass at b 1, h 1, 200 tokens padded to 256, d 128 (every
// pointer a 16-byte-aligned dummy): the base the parameter checks alter one field of.
QuantParams transposed_v_params(float qmax) {
  alignas(16) static float buf[64];
  QuantParams q{};
  q.x = TensorRef{buf, 128 * 256, 128 * 256, 128, 1};
  q.y = TensorRef{buf, 128 * 256, 128 * 256, 1, 256};
  q.scale = ScaleRef{buf, 128, 128, 0, 0};
  q.mean = buf;
  q.amax_scratch = buf;
  q.batch = q.heads = 1;
  q.seq_len = 200;
  q.seq_pad = 256;
  q.d = 128;
  q.qmax = qmax;
  return q;
}

TEST(QuantShape, StatsSplitsFollowTheChunk) {
  EXPECT_EQ(stats_splits(1), 1);
  EXPECT_EQ(stats_splits(kStatsChunkTokens), 1);
  EXPECT_EQ(stats_splits(kStatsChunkTokens + 1), 2);
  EXPECT_EQ(stats_splits(16384), 16384 / kStatsChunkTokens);
}

TEST(QuantShape, PerTokenIsOnePass) {
  const QuantPlan plan = plan_quant(request(Gran::per_token, 0, false, false), QuantProblem{2, 8, 1000, 1000});
  ASSERT_EQ(plan.launches.size(), 1u);
  const QuantLaunch& l = plan.launches[0];
  EXPECT_EQ(l.pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, false>");
  EXPECT_EQ(l.tag, "quantize_rows");
  expect_grid(l, (1000 + kRowTileTokens - 1) / kRowTileTokens, 8, 2);
  EXPECT_EQ(l.block, static_cast<unsigned>(kThreads));
  EXPECT_EQ(l.smem_bytes, 0u);
  EXPECT_EQ(l.zero_scratch_floats, 0);
  EXPECT_EQ(plan.scratch_floats, 0);
  EXPECT_EQ(plan.mean_floats, 0);
  EXPECT_EQ(plan.scale_floats, 2 * 8 * 1000);
  EXPECT_EQ(plan.scale_group, 1);
}

// Q smoothing by block means: one pass for token-wise scales (means and codes from the same loaded
// tile), a block-mean abs-max pass first for per_tensor; the means are [b, h, ceil(s / 64), d].
TEST(QuantShape, BlockMeansAreOnePassExceptPerTensor) {
  for (Gran g : {Gran::per_token, Gran::per_block, Gran::per_warp, Gran::per_thread}) {
    QuantRequest r = request(g, g == Gran::per_block ? 64 : g == Gran::per_token ? 0 : 32, false, false, Fmt::bf16, 96);
    r.block_mean = true;
    const QuantPlan plan = plan_quant(r, QuantProblem{2, 8, 1000, 1000});
    ASSERT_EQ(plan.launches.size(), 1u) << static_cast<int>(g);
    EXPECT_NE(plan.launches[0].pass.find(", false, true>"), std::string::npos) << plan.launches[0].pass;
    expect_grid(plan.launches[0], (1000 + 63) / 64, 8, 2);
    EXPECT_EQ(plan.mean_floats, 2LL * 8 * 16 * 96);
    EXPECT_EQ(plan.scratch_floats, 0);
  }
  QuantRequest t = request(Gran::per_tensor, 0, false, false);
  t.block_mean = true;
  const QuantPlan plan = plan_quant(t, QuantProblem{1, 4, 65, 65});
  ASSERT_EQ(plan.launches.size(), 2u);
  EXPECT_EQ(plan.launches[0].pass, "qattn::quant::BlockMeanAmax<qattn::Fmt::fp16, 128>");
  EXPECT_EQ(plan.launches[0].zero_scratch_floats, 1);
  expect_grid(plan.launches[0], 2, 4, 1);
  EXPECT_EQ(plan.launches[1].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_tensor, 0, false, false, true>");
  EXPECT_EQ(plan.mean_floats, 1LL * 4 * 2 * 128);
  EXPECT_EQ(plan.scratch_floats, 1);
  // Not with the whole-sequence mean, V's transposed layout or per-channel scales.
  for (QuantRequest bad : {request(Gran::per_token, 0, true, false), request(Gran::per_tensor, 0, false, true),
                           request(Gran::per_channel, 0, false, false)}) {
    bad.block_mean = true;
    EXPECT_NE(quant_request_error(bad, QuantProblem{1, 1, 256, 256}), "");
  }
}

TEST(QuantShape, SmoothedPerBlockReadsTwice) {
  const QuantProblem p{1, 4, 1500, 1536};
  const QuantPlan plan = plan_quant(request(Gran::per_block, 64, true, false, Fmt::bf16, 64), p);
  ASSERT_EQ(plan.launches.size(), 3u);
  EXPECT_EQ(plan.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::bf16, 64, false>");
  expect_grid(plan.launches[0], 3, 4, 1);
  EXPECT_EQ(plan.launches[1].pass, "qattn::quant::FinalizeStats<64, qattn::Gran::per_block, true>");
  expect_grid(plan.launches[1], 4, 1, 1);
  EXPECT_EQ(plan.launches[1].block, 64u);
  EXPECT_EQ(plan.launches[2].pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::bf16, 64, qattn::Gran::per_block, 64, true>");
  expect_grid(plan.launches[2], 1536 / 64, 4, 1);   // the padded rows get their zero codes too
  for (const QuantLaunch& l : plan.launches) EXPECT_EQ(l.zero_scratch_floats, 0) << l.pass;
  EXPECT_EQ(plan.scratch_floats, kStatsOffset + 3LL * 64 * 3 * 4);
  EXPECT_EQ(plan.mean_floats, 4 * 64);
  EXPECT_EQ(plan.scale_floats, 4 * 24);   // ceil(1500 / 64) groups per head
  EXPECT_EQ(plan.scale_group, 64);
}

// Smoothing and per_channel scales take the one-pass form (head_sync.cuh) when one head's tiles fit in
// half of the resident blocks: a single launch over a 1-D grid, its sync words zeroed first, launched
// with kOnePassMinBlocks blocks per SM.
TEST(QuantShape, HeadStatisticsQuantizeInOnePassWhenAHeadFits) {
  const QuantRequest k = request(Gran::per_token, 0, true, false);
  const int tiles = (4096 + kRowTileTokens - 1) / kRowTileTokens;   // 64
  const QuantProblem p{2, 8, 4096, 4096, 2 * tiles};
  ASSERT_TRUE(quant_one_pass(k, p));
  const QuantPlan plan = plan_quant(k, p);
  ASSERT_EQ(plan.launches.size(), 1u);
  const QuantLaunch& l = plan.launches[0];
  EXPECT_EQ(l.pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, true, false, false, true>");
  EXPECT_EQ(l.tag, "quantize_rows_1p");
  expect_grid(l, static_cast<unsigned>(tiles * 8 * 2), 1, 1);
  EXPECT_EQ(l.min_blocks, kOnePassMinBlocks);
  EXPECT_EQ(plan.scratch_floats, kSyncOffset + 16LL * sync_head_words(128));
  EXPECT_EQ(l.zero_scratch_floats, plan.scratch_floats);   // ticket, counters and totals start at zero
  EXPECT_EQ(plan.mean_floats, 2LL * 8 * 128);

  // One tile more than half the resident blocks, or no resident count at all: the statistics pass.
  for (const QuantProblem& q : {QuantProblem{2, 8, 4096 + 1, 4096 + 1, 2 * tiles}, QuantProblem{2, 8, 4096, 4096}}) {
    EXPECT_FALSE(quant_one_pass(k, q));
    const QuantPlan two = plan_quant(k, q);
    ASSERT_EQ(two.launches.size(), 3u);
    EXPECT_EQ(two.launches[0].tag, "channel_stats");
    EXPECT_EQ(two.launches[2].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, true>");
    EXPECT_EQ(two.launches[2].min_blocks, 0);
  }
  // Without smoothing a token-wise plan is one pass anyway; per_tensor's abs-max spans every head.
  EXPECT_FALSE(quant_one_pass(request(Gran::per_token, 0, false, false), p));
  EXPECT_FALSE(quant_one_pass(request(Gran::per_tensor, 0, true, false), p));
  EXPECT_EQ(plan_quant(request(Gran::per_tensor, 0, true, false), p).launches.size(), 3u);

  // The flags before OnePass are rendered too: packed int4 K with smoothing, per_block's group.
  QuantRequest k4 = request(Gran::per_block, 64, true, false);
  k4.pack4 = true;
  k4.qmax = 7;
  EXPECT_EQ(plan_quant(k4, p).launches[0].pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_block, 64, true, true, false, true>");
}

// K smoothing with token-local scales and QuantProblem::mean_sample_tokens = S below seq_len: the mean
// comes from S tokens of each head, so the statistics pass gets S as a template argument, a grid over
// the sample's chunks only and the scratch of those chunks; FinalizeStats the same S; QuantizeRows is
// the one it always was. Never the one-pass form, even where a head would fit.
TEST(QuantShape, SmoothedTokenLocalKTakesItsMeanFromTheSample) {
  const int sample = 1024, seq = 16384;
  const unsigned sample_splits = static_cast<unsigned>(stats_splits(sample, kSampledChunkTokens));   // 16
  EXPECT_EQ(sample_splits, 16u);
  for (Gran g : {Gran::per_token, Gran::per_block, Gran::per_warp, Gran::per_thread}) {
    const int group = g == Gran::per_token ? 0 : 64;
    const std::string gid = template_args::gran_enum(g);
    const QuantRequest k = request(g, group, true, false, Fmt::bf16, 64);
    for (int resident : {0, 1 << 20}) {
      const QuantProblem p{2, 8, seq, seq, resident, sample};
      SCOPED_TRACE(gid + " resident_blocks=" + std::to_string(resident));
      ASSERT_TRUE(quant_samples_mean(k, p));
      EXPECT_FALSE(quant_one_pass(k, p));
      const QuantPlan plan = plan_quant(k, p);
      ASSERT_EQ(plan.launches.size(), 3u);
      EXPECT_EQ(plan.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::bf16, 64, false, 1024>");
      EXPECT_EQ(plan.launches[0].tag, "channel_stats_s1024");
      expect_grid(plan.launches[0], sample_splits, 8, 2);
      EXPECT_EQ(plan.launches[1].pass, "qattn::quant::FinalizeStats<64, " + gid + ", true, 1024>");
      EXPECT_EQ(plan.launches[1].tag, "finalize_stats_s1024");
      expect_grid(plan.launches[1], 8, 2, 1);
      EXPECT_EQ(plan.launches[1].block, 64u);
      // The quantizer is the full-statistics plan's, over every token.
      const QuantPlan full = plan_quant(k, QuantProblem{2, 8, seq, seq});
      EXPECT_EQ(plan.launches[2].pass, full.launches[2].pass);
      EXPECT_EQ(plan.launches[2].tag, full.launches[2].tag);
      expect_grid(plan.launches[2], full.launches[2].grid[0], 8, 2);
      for (const QuantLaunch& l : plan.launches) EXPECT_EQ(l.zero_scratch_floats, 0) << l.pass;
      EXPECT_EQ(plan.scratch_floats, kStatsOffset + 3LL * 64 * sample_splits * 8 * 2);
      EXPECT_EQ(plan.mean_floats, full.mean_floats);
      EXPECT_EQ(plan.scale_floats, full.scale_floats);
      EXPECT_EQ(plan.scale_group, full.scale_group);
    }
  }
  // Packed int4 K samples too; a sample that is not a whole number of chunks gets its last, short one.
  QuantRequest k4 = request(Gran::per_thread, 64, true, false);
  k4.pack4 = true;
  k4.qmax = 7;
  const QuantPlan plan4 = plan_quant(k4, QuantProblem{1, 4, 5000, 5000, 0, 700});
  EXPECT_EQ(plan4.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::fp16, 128, false, 700>");
  expect_grid(plan4.launches[0], 11, 4, 1);   // 700 = 10 chunks of 64 and one of 60
  EXPECT_EQ(plan4.launches[2].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_thread, 64, true, true>");
}

// Where the sample does not apply the plan is exactly the one without a sample: seq_len <= S (the mean
// over every token, bit for bit), no smoothing, per_tensor K (its abs-max is over the smoothed tensor),
// per_channel, V^T and Q's block means (their statistics need every token).
TEST(QuantShape, TheSampleLeavesEveryOtherPlanAsItWas) {
  auto expect_same_plan = [](const QuantRequest& r, QuantProblem p, int sample) {
    const QuantPlan without = plan_quant(r, p);
    p.mean_sample_tokens = sample;
    EXPECT_FALSE(quant_samples_mean(r, p));
    const QuantPlan with = plan_quant(r, p);
    ASSERT_EQ(with.launches.size(), without.launches.size());
    for (size_t i = 0; i < with.launches.size(); ++i) {
      const QuantLaunch &a = with.launches[i], &b = without.launches[i];
      EXPECT_EQ(a.pass, b.pass);
      EXPECT_EQ(a.tag, b.tag);
      expect_grid(a, b.grid[0], b.grid[1], b.grid[2]);
      EXPECT_EQ(a.block, b.block) << a.pass;
      EXPECT_EQ(a.zero_scratch_floats, b.zero_scratch_floats) << a.pass;
      EXPECT_EQ(a.min_blocks, b.min_blocks) << a.pass;
    }
    EXPECT_EQ(with.scratch_floats, without.scratch_floats);
    EXPECT_EQ(with.mean_floats, without.mean_floats);
    EXPECT_EQ(with.scale_floats, without.scale_floats);
  };
  const QuantRequest k = request(Gran::per_token, 0, true, false);
  for (int seq : {1, 1000, 1024}) {   // seq_len <= S
    SCOPED_TRACE("seq " + std::to_string(seq));
    expect_same_plan(k, QuantProblem{2, 8, seq, seq}, 1024);
    expect_same_plan(k, QuantProblem{2, 8, seq, seq, 1 << 20}, 1024);   // the one-pass form stays too
  }
  EXPECT_EQ(plan_quant(k, QuantProblem{2, 8, 1024, 1024, 0, 1024}).launches[0].pass,
            "qattn::quant::ChannelStats<qattn::Fmt::fp16, 128, false>");
  expect_same_plan(k, QuantProblem{2, 8, 16384, 16384}, 0);   // 0: every token
  const QuantProblem longer{2, 8, 16384, 16384};
  expect_same_plan(request(Gran::per_token, 0, false, false), longer, 1024);    // Q, or K without smoothing
  expect_same_plan(request(Gran::per_tensor, 0, true, false), longer, 1024);    // per_tensor K
  expect_same_plan(request(Gran::per_tensor, 0, false, false), longer, 1024);
  expect_same_plan(request(Gran::per_channel, 0, true, false), longer, 1024);
  expect_same_plan(request(Gran::per_channel, 0, true, true), longer, 1024);    // V^T, smooth
  expect_same_plan(request(Gran::per_tensor, 0, true, true), longer, 1024);
  QuantRequest fp8 = request(Gran::per_channel, 0, true, true);
  fp8.code = Fmt::fp8e4m3;
  expect_same_plan(fp8, longer, 1024);
  QuantRequest q = request(Gran::per_warp, 32, false, false);
  q.block_mean = true;
  expect_same_plan(q, longer, 1024);                                            // Q smoothing
  EXPECT_THROW(plan_quant(k, QuantProblem{1, 1, 100, 100, 0, -1}), Error);
}

TEST(QuantShape, TransposedVQuantizesInOnePassWithItsCode) {
  const int pad = 4096, tiles = pad / kTransposeTileTokens;   // 32
  const QuantProblem p{1, 4, 4000, pad, 2 * tiles};
  QuantRequest v = request(Gran::per_channel, 0, false, true, Fmt::bf16, 64);
  QuantPlan plan = plan_quant(v, p);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::bf16, 64, qattn::Gran::per_channel, false, qattn::Fmt::int8, true>");
  EXPECT_EQ(plan.launches[0].tag, "quantize_transposed_1p");
  expect_grid(plan.launches[0], static_cast<unsigned>(tiles * 4), 1, 1);
  EXPECT_EQ(plan.launches[0].zero_scratch_floats, kSyncOffset + 4 * sync_head_words(64));
  v.code = Fmt::fp8e4m3;
  v.smooth = true;
  plan = plan_quant(v, p);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::bf16, 64, qattn::Gran::per_channel, true, qattn::Fmt::fp8e4m3, true>");
  // per_tensor V keeps its abs-max pass.
  EXPECT_EQ(plan_quant(request(Gran::per_tensor, 0, false, true), p).launches.size(), 2u);
}

TEST(QuantShape, PerTensorZeroesTheAmaxFirst) {
  const QuantProblem p{2, 2, 700, 700};
  const QuantPlan plain = plan_quant(request(Gran::per_tensor, 0, false, false), p);
  ASSERT_EQ(plain.launches.size(), 2u);
  EXPECT_EQ(plain.launches[0].pass, "qattn::quant::TensorAmax<qattn::Fmt::fp16, 128>");
  EXPECT_EQ(plain.launches[0].zero_scratch_floats, 1);
  expect_grid(plain.launches[0], 2, 2, 2);
  EXPECT_EQ(plain.launches[1].zero_scratch_floats, 0);
  EXPECT_EQ(plain.scratch_floats, 1);
  EXPECT_EQ(plain.scale_floats, 1);

  const QuantPlan smooth = plan_quant(request(Gran::per_tensor, 0, true, false), p);
  ASSERT_EQ(smooth.launches.size(), 3u);
  EXPECT_EQ(smooth.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::fp16, 128, true>");
  EXPECT_EQ(smooth.launches[0].zero_scratch_floats, 0);
  EXPECT_EQ(smooth.launches[1].pass, "qattn::quant::FinalizeStats<128, qattn::Gran::per_tensor, true>");
  EXPECT_EQ(smooth.launches[1].zero_scratch_floats, 1);
}

TEST(QuantShape, TransposedV) {
  const QuantProblem p{1, 8, 1000, 1024};
  const QuantPlan plan = plan_quant(request(Gran::per_channel, 0, false, true), p);
  ASSERT_EQ(plan.launches.size(), 3u);
  EXPECT_EQ(plan.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::fp16, 128, true>");
  EXPECT_EQ(plan.launches[1].pass, "qattn::quant::FinalizeStats<128, qattn::Gran::per_channel, false>");
  EXPECT_EQ(plan.launches[2].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::fp16, 128, qattn::Gran::per_channel, false>");
  expect_grid(plan.launches[2], 1024 / kVPadTokens, 8, 1);
  EXPECT_EQ(plan.scale_floats, 8 * 128);
  EXPECT_EQ(plan.mean_floats, 0);

  const QuantPlan tensor = plan_quant(request(Gran::per_tensor, 0, false, true), p);
  ASSERT_EQ(tensor.launches.size(), 2u);
  EXPECT_EQ(tensor.launches[1].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::fp16, 128, qattn::Gran::per_tensor, false>");
}

// pv=fp8e4m3: the per-channel V^T plan with e4m3 codes (the last template argument), qmax 448; other
// granularities or row layouts are refused.
TEST(QuantShape, Fp8TransposedVPlansE4m3CodesWithQmax448) {
  const QuantProblem p{1, 8, 1000, 1024};
  QuantRequest r = request(Gran::per_channel, 0, true, true);
  r.code = Fmt::fp8e4m3;
  const QuantPlan plan = plan_quant(r, p);
  ASSERT_EQ(plan.launches.size(), 3u);
  EXPECT_EQ(plan.launches[1].pass, "qattn::quant::FinalizeStats<128, qattn::Gran::per_channel, true>");
  EXPECT_EQ(plan.launches[2].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::fp16, 128, qattn::Gran::per_channel, true, qattn::Fmt::fp8e4m3>");
  EXPECT_EQ(plan.scale_floats, 8 * 128);
  QuantRequest bad = r;
  bad.gran = Gran::per_tensor;
  EXPECT_NE(quant_request_error(bad, p), "");
  bad = r;
  bad.transpose = false;
  EXPECT_NE(quant_request_error(bad, QuantProblem{1, 8, 1000, 1000}), "");

  QuantParams q = transposed_v_params(448.f);
  QuantRequest r128 = r;
  EXPECT_EQ(quant_params_error(r128, q), "");
  q.qmax = 127.f;
  EXPECT_NE(quant_params_error(r128, q).find("448"), std::string::npos);
  r128.code = Fmt::int8;
  EXPECT_EQ(quant_params_error(r128, q), "");
}

// qk=fp8e4m3's Q and K rows: the row passes and scale groups of int8 with QuantizeRows' last parameter
// (Code) set, after the defaults of the others; per_channel rows and block means refused.
TEST(QuantShape, Fp8RowsAreTheRowPassWithItsCode) {
  const QuantProblem p{1, 2, 1000, 1000};
  QuantRequest q = request(Gran::per_token, 1, false, false);
  q.code = Fmt::fp8e4m3;
  const QuantPlan plain = plan_quant(q, p);
  ASSERT_EQ(plain.launches.size(), 1u);
  EXPECT_EQ(plain.launches[0].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, false, "
                                    "false, false, false, 0, qattn::Fmt::fp8e4m3>");
  QuantRequest k = request(Gran::per_block, 64, true, false);
  k.code = Fmt::fp8e4m3;
  k.rotate = kRotateK;
  const QuantPlan smooth = plan_quant(k, p);
  ASSERT_EQ(smooth.launches.size(), 3u);
  EXPECT_EQ(smooth.launches[2].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_block, 64, true, "
                                     "false, false, false, 2, qattn::Fmt::fp8e4m3>");
  EXPECT_EQ(smooth.scale_floats, 2 * 16);   // the int8 plan's scales
  QuantRequest tensor = request(Gran::per_tensor, 0, false, false);
  tensor.code = Fmt::fp8e4m3;
  EXPECT_EQ(plan_quant(tensor, p).launches.size(), 2u);   // the abs-max first
  QuantRequest bad = request(Gran::per_channel, 0, false, false);
  bad.code = Fmt::fp8e4m3;
  EXPECT_NE(quant_request_error(bad, p).find("token-wise or per_tensor"), std::string::npos);
  bad = q;
  bad.block_mean = true;
  EXPECT_NE(quant_request_error(bad, p).find("no block means"), std::string::npos);
  bad = q;
  bad.pack4 = true;
  EXPECT_NE(quant_request_error(bad, p), "");
}

// d = 96: the same passes and grids (the idle lanes are inside the blocks); FinalizeStats runs d threads.
TEST(QuantShape, HeadDim96PlansLikeTheOthers) {
  const QuantProblem p{2, 4, 1000, 1024};
  const QuantPlan v = plan_quant(request(Gran::per_channel, 0, true, true, Fmt::bf16, 96), p);
  ASSERT_EQ(v.launches.size(), 3u);
  EXPECT_EQ(v.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::bf16, 96, true>");
  expect_grid(v.launches[0], 2, 4, 2);
  EXPECT_EQ(v.launches[1].pass, "qattn::quant::FinalizeStats<96, qattn::Gran::per_channel, true>");
  EXPECT_EQ(v.launches[1].block, 96u);
  EXPECT_EQ(v.launches[2].pass,
            "qattn::quant::QuantizeTransposed<qattn::Fmt::bf16, 96, qattn::Gran::per_channel, true>");
  expect_grid(v.launches[2], 1024 / kVPadTokens, 4, 2);
  EXPECT_EQ(v.scale_floats, 2 * 4 * 96);
  EXPECT_EQ(v.mean_floats, 2 * 4 * 96);
  EXPECT_EQ(v.scratch_floats, kStatsOffset + 3LL * 96 * 2 * 4 * 2);
  const QuantPlan k = plan_quant(request(Gran::per_block, 128, false, false, Fmt::fp16, 96), p);
  ASSERT_EQ(k.launches.size(), 1u);
  EXPECT_EQ(k.launches[0].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 96, qattn::Gran::per_block, 128, false>");
  expect_grid(k.launches[0], (1024 + 127) / 128, 4, 2);
  EXPECT_EQ(lanes_per_row(96), 16);   // 12 vectors per row, padded to an aligned group of lanes
  for (int d : {64, 128, 256}) EXPECT_EQ(lanes_per_row(d), d / kVecElems) << d;
}

// per_warp / per_thread: one row quantizer over 64-token tiles (whole groups), the group passed as the
// Q (32) or K (64) mapping; scales in the per-token layout (group 1: the attention kernel's per-token path).
TEST(QuantShape, FragmentGranularitiesPlanOneRowPassWithPerTokenScales) {
  const QuantProblem p{2, 4, 1000, 1000};
  for (Gran g : {Gran::per_warp, Gran::per_thread})
    for (int group : {32, 64}) {
      const std::string gid = g == Gran::per_warp ? "qattn::Gran::per_warp" : "qattn::Gran::per_thread";
      const QuantPlan plain = plan_quant(request(g, group, false, false), p);
      ASSERT_EQ(plain.launches.size(), 1u);
      EXPECT_EQ(plain.launches[0].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, " + gid + ", " +
                                            std::to_string(group) + ", false>");
      expect_grid(plain.launches[0], (1000 + kRowTileTokens - 1) / kRowTileTokens, 4, 2);
      EXPECT_EQ(plain.scale_group, 1);
      EXPECT_EQ(plain.scale_floats, 2 * 4 * 1000);
      EXPECT_EQ(plain.scratch_floats, 0);
      const QuantPlan smooth = plan_quant(request(g, group, true, false), p);
      ASSERT_EQ(smooth.launches.size(), 3u);
      EXPECT_EQ(smooth.launches[0].pass, "qattn::quant::ChannelStats<qattn::Fmt::fp16, 128, false>");
      EXPECT_EQ(smooth.launches[1].pass, "qattn::quant::FinalizeStats<128, " + gid + ", true>");
      EXPECT_EQ(smooth.launches[2].pass, "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, " + gid + ", " +
                                             std::to_string(group) + ", true>");
      EXPECT_EQ(smooth.mean_floats, 2 * 4 * 128);
      const ScaleRef s = dense_scale_ref(request(g, group, false, false), p, nullptr);
      EXPECT_EQ(s.group, 1);
      EXPECT_EQ(s.sh, 1000);
      EXPECT_EQ(s.sb, 4000);
    }
  const QuantProblem ok{1, 1, 100, 128};
  for (Gran g : {Gran::per_warp, Gran::per_thread}) {
    EXPECT_THROW(plan_quant(request(g, 128, false, false), ok), Error);
    EXPECT_THROW(plan_quant(request(g, 16, false, false), ok), Error);
    EXPECT_THROW(plan_quant(request(g, 64, false, true), ok), Error);   // not for V^T
  }
}

TEST(QuantShape, RejectsWhatThePassesCannotDo) {
  const QuantProblem ok{1, 1, 100, 128};
  EXPECT_THROW(plan_quant(request(Gran::per_token, 0, false, true), ok), Error);      // token scale on V^T
  EXPECT_THROW(plan_quant(request(Gran::per_channel, 0, false, true), QuantProblem{1, 1, 100, 100}), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_block, 32, false, false), ok), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_token, 0, false, false, Fmt::int8), ok), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_token, 0, false, false, Fmt::fp16, 80), ok), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_warp, 0, false, false), ok), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_token, 0, false, false), QuantProblem{1, 1, 100, 99}), Error);
  EXPECT_THROW(plan_quant(request(Gran::per_token, 0, false, false), QuantProblem{1, 1, 0, 0}), Error);
  try {
    plan_quant(request(Gran::per_block, 32, false, false), ok);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("64 or 128"), std::string::npos) << e.what();
  }
}

// rotate=hadamard: QuantizeRows' last parameter, rendered only when set (earlier ones as their defaults),
// for Q rows (alone or with block means) and smoothed K rows; refused where scales are not token-local.
TEST(QuantShape, RotationIsTheRowPassLastParameter) {
  const QuantProblem p{1, 2, 1000, 1000};
  QuantRequest q = request(Gran::per_warp, 32, false, false);
  q.rotate = kRotateQ;
  const QuantPlan plain = plan_quant(q, p);
  ASSERT_EQ(plain.launches.size(), 1u);
  EXPECT_EQ(plain.launches[0].pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_warp, 32, false, false, false, false, 1>");
  q.block_mean = true;
  EXPECT_EQ(plan_quant(q, p).launches[0].pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_warp, 32, false, false, true, false, 1>");
  QuantRequest k = request(Gran::per_token, 1, true, false);
  k.rotate = kRotateK;
  const QuantPlan smooth = plan_quant(k, p);
  ASSERT_EQ(smooth.launches.size(), 3u);   // statistics, finalize, then the rotating row pass
  EXPECT_EQ(smooth.launches[2].pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, true, false, false, false, 2>");
  QuantProblem resident = p;
  resident.resident_blocks = 264;   // one pass: OnePass and Rotate both set
  EXPECT_EQ(plan_quant(k, resident).launches.back().pass,
            "qattn::quant::QuantizeRows<qattn::Fmt::fp16, 128, qattn::Gran::per_token, 1, true, false, false, true, 2>");
  for (QuantRequest bad : {request(Gran::per_tensor, 0, false, false), request(Gran::per_channel, 0, false, true),
                           request(Gran::per_channel, 0, false, false)}) {
    bad.rotate = kRotateK;
    EXPECT_NE(quant_request_error(bad, QuantProblem{1, 2, 1000, 1024}).find("token-local"), std::string::npos)
        << template_args::gran_enum(bad.gran);
  }
  QuantRequest wide = request(Gran::per_block, 128, false, false);
  wide.rotate = kRotateQ;
  EXPECT_NE(quant_request_error(wide, p).find("groups of 64"), std::string::npos);
  QuantRequest other = request(Gran::per_token, 1, false, false);
  other.rotate = 3;
  EXPECT_THROW(plan_quant(other, p), Error);
}

TEST(QuantShape, DenseScaleRefMatchesAbi) {
  const QuantProblem p{2, 3, 130, 130};
  const float* base = reinterpret_cast<const float*>(0x1000);
  const ScaleRef tok = dense_scale_ref(request(Gran::per_token, 0, false, false), p, base);
  EXPECT_EQ(tok.group, 1);
  EXPECT_EQ(tok.sh, 130);
  EXPECT_EQ(tok.sb, 390);
  const ScaleRef blk = dense_scale_ref(request(Gran::per_block, 128, false, false), p, base);
  EXPECT_EQ(blk.group, 128);
  EXPECT_EQ(blk.sh, 2);
  const ScaleRef chn = dense_scale_ref(request(Gran::per_channel, 0, false, true), p, base);
  EXPECT_EQ(chn.group, 0);
  EXPECT_EQ(chn.sh, 128);
  const ScaleRef ten = dense_scale_ref(request(Gran::per_tensor, 0, false, false), p, base);
  EXPECT_EQ(ten.sb, 0);
  EXPECT_EQ(ten.sh, 0);
  EXPECT_EQ(ten.ptr, base);
}

TEST(QuantShape, ParamChecksCatchBadStridesAndPointers) {
  const QuantRequest v = request(Gran::per_channel, 0, true, true);
  QuantParams q = transposed_v_params(127.f);
  EXPECT_EQ(quant_params_error(v, q), "");
  QuantParams bad = q;
  bad.y.sc = 200;
  EXPECT_NE(quant_params_error(v, bad), "");
  bad = q;
  bad.y.sc = 128;   // shorter than seq_pad
  EXPECT_NE(quant_params_error(v, bad), "");
  bad = q;
  bad.x.ss = 100;   // rows not 16-byte aligned
  EXPECT_NE(quant_params_error(v, bad), "");
  bad = q;
  bad.mean = nullptr;
  EXPECT_NE(quant_params_error(v, bad), "");
  bad = q;
  bad.qmax = 7.5f;
  EXPECT_NE(quant_params_error(v, bad), "");
  bad = q;
  bad.x.ptr = static_cast<char*>(q.x.ptr) + 2;
  EXPECT_NE(quant_params_error(v, bad), "");
  // Rows: y must keep sc = 1.
  const QuantRequest k = request(Gran::per_token, 0, false, false);
  QuantParams rows = q;
  rows.y = TensorRef{q.y.ptr, 128 * 256, 128 * 256, 128, 1};
  EXPECT_EQ(quant_params_error(k, rows), "");
  rows.y.sc = 2;
  EXPECT_NE(quant_params_error(k, rows), "");
}

}  // namespace
}  // namespace qattn::gen
