#include <gtest/gtest.h>

#include "qattn/error.hpp"
#include "generator/search_space.hpp"
#include "qattn/spec.hpp"

namespace qattn {
namespace {

TEST(Spec, CanonicalTextRoundTrips) {
  const char* texts[] = {
      "prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=128 causal gqa=4 arch=sm_90a",
      "prefill qk=fp16 pv=fp16 out=fp16 d=64",
      "prefill qk=bf16 pv=bf16 out=bf16 d=128 causal arch=sm_80",
      "decode qk=int4:per_thread pv=fp8e4m3:per_channel out=bf16 d=256 gqa=8 splitk=16 softmax=unified_max "
      "accum=two_level smooth=qkv arch=sm_89",
      "prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=96 smooth=k arch=sm_86",
      "prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=qkv rotate=hadamard arch=sm_89",
      "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 softmax=sas smooth=kv arch=sm_90",
      "decode qk=int4:per_group pv=int4:per_group out=bf16 d=128 causal gqa=4 splitk=8 paged arch=sm_90a",
      "decode qk=fp8e4m3:per_head pv=fp8e4m3:per_head out=fp16 d=64 paged flow=gemv arch=sm_89",
      "decode qk=flashq:per_channel pv=flashq:per_channel out=bf16 d=128 softmax=unified_max flow=gemv",
  };
  for (const char* t : texts) {
    SCOPED_TRACE(t);
    EXPECT_EQ(to_string(parse_spec(t)), t);
  }
}

// rotate=none is the default and prints nothing; the field is parsed in any position and compared.
TEST(Spec, RotationDefaultsToNoneAndHadamardPrints) {
  const Spec plain = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv");
  EXPECT_EQ(plain.rotate, Rotation::none);
  EXPECT_EQ(parse_spec("prefill rotate=none qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv"), plain);
  const Spec rot = parse_spec("rotate=hadamard prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv");
  EXPECT_EQ(rot.rotate, Rotation::hadamard);
  EXPECT_NE(rot, plain);
  EXPECT_EQ(to_string(rot), "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv rotate=hadamard");
  try {
    parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 rotate=random");
    ADD_FAILURE() << "rotate=random parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("unknown rotation 'random'; accepted: none, hadamard"), std::string::npos) << e.what();
  }
}

// flow=auto is the default (the runtime's tuned choice) and prints nothing; a pinned flow prints.
TEST(Spec, DataflowDefaultsToAutoAndPinnedFlowsPrint) {
  const Spec plain = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4");
  EXPECT_EQ(plain.flow, Dataflow::automatic);
  EXPECT_EQ(parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 flow=auto"), plain);
  const Spec mma = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 flow=mma");
  EXPECT_EQ(mma.flow, Dataflow::mma);
  EXPECT_NE(mma, plain);
  EXPECT_EQ(to_string(mma), "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 flow=mma");
  EXPECT_EQ(to_string(plain), "decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4");
}

TEST(Spec, ParseAcceptsAnyOrderAndPrintsCanonical) {
  const Spec s = parse_spec("  arch=sm_90a d=128 causal out=fp16 pv=int8:per_channel qk=int8:per_token prefill ");
  EXPECT_EQ(to_string(s), "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal arch=sm_90a");
  EXPECT_EQ(s.qk.fmt, Fmt::int8);
  EXPECT_EQ(s.pv.gran, Gran::per_channel);
  EXPECT_TRUE(s.causal);
  EXPECT_EQ(s.arch, Arch::sm_90a);
}

TEST(Spec, EveryDefaultGridPointRoundTrips) {
  for (Arch a : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90, Arch::sm_90a})
    for (const Spec& s : gen::default_grid(a)) {
      EXPECT_EQ(parse_spec(to_string(s)), s) << to_string(s);
    }
}

std::string error_of(const char* text) {
  try {
    parse_spec(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    return e.what();
  }
  return "";
}

TEST(Spec, BadInputSaysWhatAndWhatIsAccepted) {
  EXPECT_NE(error_of("prefill qk=int9:per_token pv=fp16 out=fp16 d=128").find("accepted: fp16, bf16, int8"),
            std::string::npos);
  EXPECT_NE(error_of("prefill qk=int8 pv=fp16 out=fp16 d=128").find("needs a scale granularity"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16:per_token pv=fp16 out=fp16 d=128").find("take no granularity"), std::string::npos);
  EXPECT_NE(error_of("qk=fp16 pv=fp16 out=fp16 d=128").find("no phase"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16").find("no head dimension"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16 d=12x").find("not an integer"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_75").find("sm_80, sm_86, sm_89, sm_90, sm_90a"),
            std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16 d=128 smooth=vk").find("in that order"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16 d=128 d=64").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("prefill qk=fp16 pv=fp16 out=fp16 d=128 bogus").find("unknown spec token"), std::string::npos);
  EXPECT_NE(error_of("").find("empty spec"), std::string::npos);
  for (const char* t : {"prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_75", "prefill decode qk=fp16 pv=fp16 out=fp16 d=1"}) {
    const std::string e = error_of(t);
    EXPECT_FALSE(e.empty()) << t;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "errors are one line: " << e;
  }
}

}  // namespace
}  // namespace qattn
