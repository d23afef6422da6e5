// The row alignment attention() / prepare() / run() demand of the caller's tensors (call_layout.hpp),
// on the CPU: what each kernel form reads or writes directly must start its rows on that kernel's access
// size, and the reason names the tensor, the rule and what it got.
#include <gtest/gtest.h>

#include <string>

#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "runtime/calls/call_layout.hpp"

namespace qattn {
namespace {

void* at(unsigned long long address) { return reinterpret_cast<void*>(address); }

// [batch, seq, heads, d] rows, 64 heads of d 128 (a stride of 8192 elements), at a 256-byte aligned address.
TensorView good() { return bshd(at(0x100000), 1024, 64, 128); }

TensorView shifted(unsigned long long bytes) {
  TensorView t = good();
  t.data = at(0x100000 + bytes);
  return t;
}

TensorView with_ss(long long ss) {
  TensorView t = good();
  t.ss = ss;
  return t;
}

const Spec kFp16 = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a");
const Spec kInt8 = parse_spec("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv arch=sm_90a");
const Spec kPvFp16 = parse_spec("prefill qk=int8:per_warp pv=fp16 out=fp16 d=128 smooth=k arch=sm_80");

TEST(CallLayout, AlignedTensorsPass) {
  const Tiling plain = parse_tiling("bm64_bn128_w4_s2_wg"), fused = parse_tiling("bm64_bn128_w4_s2_wg_qf_tma");
  for (const Spec& spec : {kFp16, kInt8, kPvFp16})
    for (const Tiling& t : {plain, fused}) {
      EXPECT_EQ(rt::input_layout_problem(spec, t, good(), good(), good()), "") << to_string(spec);
      EXPECT_EQ(rt::output_layout_problem(spec, good()), "") << to_string(spec);
    }
}

TEST(CallLayout, TheFp16KernelNeeds16ByteRowsEverywhere) {
  const Tiling t = parse_tiling("bm128_bn64_w4_s1");
  const std::string q = rt::input_layout_problem(kFp16, t, shifted(8), good(), good());
  EXPECT_NE(q.find("reads q in 16-byte chunks"), std::string::npos) << q;
  EXPECT_NE(q.find("got data % 16 = 8"), std::string::npos) << q;
  const std::string k = rt::input_layout_problem(kFp16, t, good(), with_ss(8 * 64 + 4), good());
  EXPECT_NE(k.find("reads k"), std::string::npos) << k;
  EXPECT_NE(k.find("ss 516"), std::string::npos) << k;
  EXPECT_NE(rt::input_layout_problem(kFp16, t, good(), good(), shifted(4)).find("reads v"), std::string::npos);
  const std::string o = rt::output_layout_problem(kFp16, with_ss(8 * 64 + 4));
  EXPECT_NE(o.find("stores o in 16-byte chunks"), std::string::npos) << o;
  EXPECT_EQ(o.find('\n'), std::string::npos) << "one line";
}

TEST(CallLayout, QuantizedKernelsCheckOnlyWhatTheyReadThemselves) {
  const Tiling plain = parse_tiling("bm64_bn128_w4_s2_wg"), fused = parse_tiling("bm64_bn128_w4_s2_wg_qf");
  // The Q / K / V passes read the inputs of the plain form (and check them themselves).
  EXPECT_EQ(rt::input_layout_problem(kInt8, plain, shifted(4), shifted(4), shifted(4)), "");
  // _qf reads Q as given.
  const std::string q = rt::input_layout_problem(kInt8, fused, shifted(4), good(), good());
  EXPECT_NE(q.find("fused-Q kernel (_qf) reads q"), std::string::npos) << q;
  EXPECT_EQ(rt::input_layout_problem(kInt8, fused, good(), shifted(4), shifted(4)), "");
  // pv=fp16 reads V as given.
  const Tiling mma = parse_tiling("bm64_bn64_w4_s2");
  const std::string v = rt::input_layout_problem(kPvFp16, mma, good(), good(), with_ss(8 * 64 + 2));
  EXPECT_NE(v.find("pv=fp16 reads v"), std::string::npos) << v;
  EXPECT_EQ(rt::input_layout_problem(kPvFp16, mma, shifted(2), shifted(2), good()), "");
}

TEST(CallLayout, QuantizedKernelsStoreElementPairs) {
  // 4-byte rows suffice (ss a multiple of 2 elements) ...
  EXPECT_EQ(rt::output_layout_problem(kInt8, with_ss(8 * 64 + 2)), "");
  EXPECT_EQ(rt::output_layout_problem(kInt8, shifted(4)), "");
  // ... an odd stride or a 2-byte offset does not.
  const std::string odd = rt::output_layout_problem(kInt8, with_ss(8 * 64 + 1));
  EXPECT_NE(odd.find("4-byte aligned"), std::string::npos) << odd;
  EXPECT_NE(odd.find("multiples of 2 elements"), std::string::npos) << odd;
  EXPECT_NE(rt::output_layout_problem(kInt8, shifted(2)).find("got data % 4 = 2"), std::string::npos);
  TensorView sb = good();
  sb.sb = 3;
  EXPECT_NE(rt::output_layout_problem(kInt8, sb).find("sb 3"), std::string::npos);
}

}  // namespace
}  // namespace qattn
