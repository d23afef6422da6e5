#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "qattn/error.hpp"
#include "qattn/tuner.hpp"

namespace qattn {
namespace {

// A CPU stand-in for the GPU: per tiling it can fail to compile, compute wrong numbers, throw while
// running, or report a fixed set of timing samples.
class FakeRunner : public CandidateRunner {
 public:
  struct Behaviour {
    std::string compile_error;
    bool wrong_numbers = false;
    bool throws = false;
    std::vector<double> samples;
  };
  std::map<std::string, Behaviour> by_tiling;
  int compile_calls = 0, verify_calls = 0, time_calls = 0;
  TimingOptions last_options;

  std::vector<std::string> compile(const Spec&, const std::vector<Tiling>& ts) override {
    ++compile_calls;
    std::vector<std::string> errs;
    for (const Tiling& t : ts) errs.push_back(by_tiling[to_string(t)].compile_error);
    return errs;
  }
  Verification verify(const Spec&, const Tiling& t) override {
    ++verify_calls;
    const Behaviour& b = by_tiling[to_string(t)];
    return {!b.wrong_numbers, b.wrong_numbers ? "cos=0.2" : "cos=0.9999"};
  }
  std::vector<double> time(const Spec&, const Tiling& t, const Problem&, const TimingOptions& o) override {
    ++time_calls;
    last_options = o;
    const Behaviour& b = by_tiling[to_string(t)];
    if (b.throws) throw std::runtime_error("launch failed: too many resources requested");
    return b.samples;
  }
};

const Spec kSpec = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a");
const Tiling A{128, 64, 4, 2}, B{64, 64, 4, 2}, C{128, 32, 4, 2}, D{64, 32, 4, 1};

TEST(Tuner, PicksTheFastestMedianNotTheFastestSample) {
  FakeRunner r;
  r.by_tiling[to_string(A)].samples = {10, 10, 10, 10, 10};
  r.by_tiling[to_string(B)].samples = {1, 30, 30, 30, 30};   // one lucky sample, slow median
  r.by_tiling[to_string(C)].samples = {9, 8, 9.5, 100, 8.5};
  const TuningResult res = tune(kSpec, Problem{}, {A, B, C}, r);
  EXPECT_EQ(res.winner, C);
  EXPECT_DOUBLE_EQ(res.time_us, 9);
  ASSERT_EQ(res.candidates.size(), 3u);
  EXPECT_EQ(res.candidates[2].status, CandidateStatus::won);
  EXPECT_EQ(res.candidates[0].status, CandidateStatus::lost);
  EXPECT_EQ(r.compile_calls, 1) << "all candidates are compiled in one batch (in parallel by the runner)";
}

TEST(Tuner, WrongNumbersNeverWinEvenWhenFastest) {
  FakeRunner r;
  r.by_tiling[to_string(A)].samples = {10};
  r.by_tiling[to_string(B)].samples = {1};
  r.by_tiling[to_string(B)].wrong_numbers = true;
  const TuningResult res = tune(kSpec, Problem{}, {A, B}, r);
  EXPECT_EQ(res.winner, A);
  EXPECT_EQ(res.candidates[1].status, CandidateStatus::verify_failed);
  EXPECT_EQ(r.time_calls, 1) << "an unverified candidate is not even timed";
}

TEST(Tuner, CompileAndRunFailuresAreRecordedNotFatal) {
  FakeRunner r;
  r.by_tiling[to_string(A)].compile_error = "error: too much shared data";
  r.by_tiling[to_string(B)].throws = true;
  r.by_tiling[to_string(C)].samples = {5, 6, 7};
  r.by_tiling[to_string(D)].samples = {};   // no samples: treated as a failed run
  const TuningResult res = tune(kSpec, Problem{}, {A, B, C, D}, r);
  EXPECT_EQ(res.winner, C);
  EXPECT_EQ(res.candidates[0].status, CandidateStatus::compile_failed);
  EXPECT_NE(res.candidates[0].detail.find("shared data"), std::string::npos);
  EXPECT_EQ(res.candidates[1].status, CandidateStatus::run_failed);
  EXPECT_EQ(res.candidates[3].status, CandidateStatus::run_failed);
  const auto j = nlohmann::json::parse(res.candidates_json());
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[2]["status"], "won");
  EXPECT_EQ(j[2]["kernel"], res.winner_name);
  EXPECT_EQ(j[0]["status"], "compile_failed");
}

TEST(Tuner, TiesKeepTheEarlierPreferredTiling) {
  FakeRunner r;
  r.by_tiling[to_string(A)].samples = {7, 7, 7};
  r.by_tiling[to_string(B)].samples = {7, 7, 7};
  EXPECT_EQ(tune(kSpec, Problem{}, {A, B}, r).winner, A);
  EXPECT_EQ(tune(kSpec, Problem{}, {B, A}, r).winner, B);
}

TEST(Tuner, NothingPassingIsAnErrorListingEveryReason) {
  FakeRunner r;
  r.by_tiling[to_string(A)].compile_error = "ptxas fatal";
  r.by_tiling[to_string(B)].wrong_numbers = true;
  try {
    tune(kSpec, Problem{}, {A, B}, r);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compile_failed"), std::string::npos) << m;
    EXPECT_NE(m.find("verify_failed"), std::string::npos) << m;
  }
  EXPECT_THROW(tune(kSpec, Problem{}, {}, r), Error);
}

TEST(Tuner, TimingOptionsReachTheRunner) {
  FakeRunner r;
  r.by_tiling[to_string(A)].samples = {3};
  TimingOptions o;
  o.repeats = 31;
  o.rotate_buffers = 6;
  tune(kSpec, Problem{}, {A}, r, o);
  EXPECT_EQ(r.last_options.repeats, 31);
  EXPECT_EQ(r.last_options.rotate_buffers, 6);
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(ProblemBucket, PowersOfTwoClampedAndRepresentative) {
  EXPECT_EQ(problem_bucket(parse_problem("b=1,hq=32,hkv=8,q=4096,kv=4096")), "q4096_kv4096_bh32");
  EXPECT_EQ(problem_bucket(parse_problem("b=3,hq=32,hkv=8,q=4097,kv=1")), "q8192_kv16_bh128");
  EXPECT_EQ(problem_bucket(parse_problem("b=1,hq=1,hkv=1,q=1,kv=1000000")), "q16_kv262144_bh1");
  EXPECT_EQ(problem_bucket(parse_problem("b=1,hq=32,hkv=8,q=3000,kv=3000")),
            problem_bucket(parse_problem("b=1,hq=32,hkv=8,q=4000,kv=2100")));
  const Problem rep = bucket_representative("q8192_kv16_bh128", parse_problem("b=3,hq=32,hkv=8,q=4097,kv=1"));
  EXPECT_EQ(rep.q_len, 8192);
  EXPECT_EQ(rep.kv_len, 16);
  EXPECT_EQ(rep.batch, 4);
  EXPECT_EQ(problem_bucket(rep), "q8192_kv16_bh128");
  EXPECT_THROW(bucket_representative("nonsense", Problem{}), Error);
}

}  // namespace
}  // namespace qattn
