// calibrate() on the GPU: every default candidate runs through Runtime::attention on sample data with
// outliers, the choice is stored, and a second runtime on the same cache file reuses it without measuring.
#include <gtest/gtest.h>

#include <random>

#include "qattn/calibrate.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/tuning/host_data.hpp"
#include "tests/cache/cache_test_support.hpp"
#include "tests/common/gpu_test.hpp"

namespace qattn {
namespace {

class CalibrateGpu : public test::GpuTest {};

rt::DeviceBuffer upload(std::mt19937_64& rng, long long rows, int d, int biased, int scaled) {
  const std::vector<float> x = rt::random_activations(rng, rows, d, biased, scaled);
  std::vector<std::uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = rt::to_bits(Fmt::fp16, x[i]);
  return rt::DeviceBuffer::from(bits);
}

TEST_F(CalibrateGpu, MeasuresStoresAndReuses) {
  cache::testing::TempDir dir;
  const Spec reference = parse_spec_family("prefill out=fp16 d=128 causal gqa=4");
  const Problem p = parse_problem("b=1,hq=8,hkv=2,q=512,kv=512");
  std::mt19937_64 rng(7);
  rt::DeviceBuffer q = upload(rng, 1LL * p.q_len * p.heads_q, 128, 0, 4);
  rt::DeviceBuffer k = upload(rng, 1LL * p.kv_len * p.heads_kv, 128, 6, 0);
  rt::DeviceBuffer v = upload(rng, 1LL * p.kv_len * p.heads_kv, 128, 2, 0);
  AttentionCall call;
  call.spec = reference;
  call.problem = p;
  call.q = bshd(q.as<void>(), p.q_len, p.heads_q, 128);
  call.k = bshd(k.as<void>(), p.kv_len, p.heads_kv, 128);
  call.v = bshd(v.as<void>(), p.kv_len, p.heads_kv, 128);
  RuntimeOptions o;
  o.cache_path = dir.file("c.db");
  o.tune = false;   // accuracy, not speed: the default tilings
  QuantDecision first;
  {
    Runtime runtime(o);
    first = calibrate(runtime, "test.layer", call);
  }
  EXPECT_FALSE(first.from_cache);
  // The ladder of this device's arch (its fast rungs first: on the H100, INT8 Q·K^T with FP8 P·V, plain
  // and rotated), every rung measured.
  const std::vector<Spec> ladder = default_quant_candidates(Runtime(o).resolve(reference));
  ASSERT_EQ(first.candidates.size(), ladder.size());
  ASSERT_GT(ladder.size(), default_quant_candidates(reference).size()) << "no fast rungs for " << to_string(ladder[0]);
  for (size_t i = 0; i < ladder.size(); ++i) {
    const CandidateResult& c = first.candidates[i];
    SCOPED_TRACE(to_string(c.spec));
    EXPECT_EQ(c.spec, ladder[i]);
    EXPECT_TRUE(c.verdict == CandidateVerdict::passed || c.verdict == CandidateVerdict::below_threshold) << c.detail;
    EXPECT_EQ(c.metrics.non_finite, 0);
    EXPECT_GT(c.metrics.cosine, c.spec.qk.fmt == Fmt::int4 ? 0.9 : 0.99) << "a correct kernel is far above this";
  }
  EXPECT_TRUE(first.fallback || first.chosen.quantized()) << first.reason;
  Runtime again(o);
  const QuantDecision second = calibrate(again, "test.layer", call);
  EXPECT_TRUE(second.from_cache) << second.cache_note;
  EXPECT_EQ(second.chosen, first.chosen);
  EXPECT_EQ(again.counters().loads, 0) << "reuse launches nothing";
}

}  // namespace
}  // namespace qattn
