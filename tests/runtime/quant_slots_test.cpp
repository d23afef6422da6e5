// The quantization plans attention() launches (quant_slots), the streams their passes go on (pass_lanes)
// and the helper kernels compiled for a spec (helper_sources), on the CPU: RuntimeOptions::
// k_mean_sample_tokens reaches K's plan only, and the compile-only list holds K's sampled statistics passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qattn/spec.hpp"
#include "runtime/calls/helper_kernels.hpp"

namespace qattn {
namespace {

TEST(QuantSlots, TheKMeanSampleReachesKOnly) {
  const Spec spec = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a");
  const Problem p{1, 2, 2, 4096, 4096};
  for (int resident : {0, 1 << 20}) {   // the one-pass form enabled too: V takes it, K keeps the sample
    SCOPED_TRACE("resident_blocks=" + std::to_string(resident));
    const auto slots = rt::quant_slots(spec, p, false, resident, 1024);
    EXPECT_EQ(slots[0].problem.mean_sample_tokens, 0);
    EXPECT_EQ(slots[1].problem.mean_sample_tokens, 1024);
    EXPECT_EQ(slots[2].problem.mean_sample_tokens, 0);
    EXPECT_TRUE(gen::quant_samples_mean(slots[1].request, slots[1].problem));
    ASSERT_EQ(slots[1].plan.launches.size(), 3u);
    EXPECT_EQ(slots[1].plan.launches[0].tag, "channel_stats_s1024");
    EXPECT_EQ(slots[1].plan.launches[0].grid[0], 1024u / quant::kSampledChunkTokens);
    EXPECT_EQ(slots[2].plan.launches.size(), resident ? 1u : 3u);
    EXPECT_EQ(slots[2].plan.launches[0].tag, resident ? "quantize_transposed_1p" : "channel_stats");
  }
  // 0: K's mean over every key, as before the option.
  const auto every = rt::quant_slots(spec, p, false, 0, 0);
  EXPECT_EQ(every[1].plan.launches[0].tag, "channel_stats");
  EXPECT_EQ(every[1].plan.launches[0].grid[0], static_cast<unsigned>(quant::stats_splits(4096)));
}

// The sampled statistics passes in a spec's helper list, in order (a pass listed twice shows twice):
// K's statistics and finalize passes of a sequence longer than the sample, when K is smoothed with
// token-wise scales and the sample is on.
std::vector<std::string> sampled_passes(const char* text, int sample) {
  std::vector<std::string> out;
  for (const gen::Source& s : rt::helper_sources(parse_spec(text), sample))
    if (s.kernel_name.find("stats_s") != std::string::npos) out.push_back(s.kernel_name);
  return out;
}

TEST(HelperSources, ListKsSampledStatisticsPasses) {
  const char* per_token = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a";
  EXPECT_EQ(sampled_passes(per_token, 1024),
            (std::vector<std::string>{"qattn_quant_f16_i8tok_smooth_d128__channel_stats_s1024",
                                      "qattn_quant_f16_i8tok_smooth_d128__finalize_stats_s1024"}));
  EXPECT_EQ(sampled_passes(per_token, 0).size(), 0u);
  EXPECT_EQ(sampled_passes("prefill qk=int8:per_warp pv=fp16 out=bf16 d=64 smooth=k arch=sm_90a", 300).size(), 2u);
  // per_tensor K and unsmoothed K have no sampled pass.
  EXPECT_EQ(sampled_passes("prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a", 1024).size(), 0u);
  EXPECT_EQ(sampled_passes("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 arch=sm_90a", 1024).size(), 0u);
}

// Which operands' passes leave the caller's stream (rt::ExperimentOptions::concurrent_passes), from the slots
// quant_slots gives each form: V's whenever another operand has passes too, Q's only beside K's.
TEST(PassLanes, VBesideKAndQBesideKWhereTheyHavePasses) {
  const Problem p{1, 4, 2, 4096, 4096};
  struct Row {
    const char* spec;
    bool q_fused;
    std::array<int, 3> lanes;
  };
  const Row rows[] = {
      // fused Q (_qf): K on the caller's stream, V beside it
      {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a", true, {-1, -1, 0}},
      // a Q pass too: Q on the second side stream
      {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a", false, {1, -1, 0}},
      {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=qkv arch=sm_90a", false, {1, -1, 0}},
      // pv=fp16: V is read as given, no passes: nothing to run beside Q and K, no fork
      {"prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 smooth=k arch=sm_90a", false, {-1, -1, -1}},
      {"prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 smooth=k arch=sm_90a", true, {-1, -1, -1}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::string(r.spec) + (r.q_fused ? " _qf" : ""));
    const auto slots = rt::quant_slots(parse_spec(r.spec), p, false, 0, 1024, r.q_fused);
    EXPECT_EQ(rt::pass_lanes(slots, true), r.lanes);
    EXPECT_EQ(rt::pass_lanes(slots, false), (std::array<int, 3>{-1, -1, -1}));
  }
}

}  // namespace
}  // namespace qattn
