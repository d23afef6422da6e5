// The decode split policy (plan_decode_splits) and the decode helper kernels, on the CPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "qattn/decode.hpp"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "tests/common/expect_error.hpp"

namespace qattn {
namespace {

constexpr int kH100Capacity = 132 * 3;   // 3 resident CTAs of 4 warps per SM (168 registers)

// Every split holds whole chunks, none is empty at kv_len, and together they cover kv_len.
void expect_consistent(const DecodeSplits& p, int kv_len, int block_n) {
  EXPECT_GE(p.splits, 1);
  EXPECT_EQ(p.split_tokens % block_n, 0);
  EXPECT_GE(static_cast<long long>(p.splits) * p.split_tokens, kv_len);
  EXPECT_LT(static_cast<long long>(p.splits - 1) * p.split_tokens, kv_len);
}

TEST(DecodeSplits, FillOneWaveWithFewSplits) {
  // The H100 measurements behind the policy (bench/results/decode_*): b 8 x 8 KV heads, 128k tokens
  // ran fastest at 6 splits (384 of 396 resident CTAs); b 8, 4k tokens at 4.
  DecodeSplits p = plan_decode_splits(0, 131072, 64, 4, 64, kH100Capacity);
  EXPECT_EQ(p.splits, 6);
  expect_consistent(p, 131072, 64);
  p = plan_decode_splits(0, 4096, 64, 4, 64, kH100Capacity);
  EXPECT_EQ(p.splits, 4);   // at least 4 chunks per warp: 64 chunks / 16
  expect_consistent(p, 4096, 64);
  // Many units already fill the GPU: the fewest splits with >= 95% busy waves (512 units: 3 -> 1536
  // CTAs = 3.9 waves, 97% busy; 1 split would leave the second wave 71% empty).
  p = plan_decode_splits(0, 32768, 64, 4, 512, kH100Capacity);
  EXPECT_EQ(p.splits, 3);
}

TEST(DecodeSplits, ShortCachesAndRequests) {
  for (int kv : {1, 15, 16, 17, 63, 64, 65, 1000, 4097}) {
    const DecodeSplits p = plan_decode_splits(0, kv, 32, 4, 8, kH100Capacity);
    expect_consistent(p, kv, 32);
    EXPECT_LE(p.splits, std::max(1, (kv + 31) / 32 / 16)) << kv;   // >= 4 chunks per warp of 4
  }
  // A requested count is taken, clamped to the chunks, and trailing empty splits are dropped.
  DecodeSplits p = plan_decode_splits(7, 4097, 16, 4, 1, kH100Capacity);
  EXPECT_EQ(p.splits, 7);
  expect_consistent(p, 4097, 16);
  p = plan_decode_splits(128, 100, 16, 4, 1, kH100Capacity);
  EXPECT_EQ(p.splits, 7);   // 7 chunks of 16 tokens
  expect_consistent(p, 100, 16);
}

TEST(DecodeCompileOnly, KernelAndHelpersCompileWithoutAGpu) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  const Spec s = parse_spec("decode qk=int4:per_group pv=int4:per_group out=fp16 d=128 gqa=4 causal paged arch=sm_89");
  const CompiledKernel k = rt.compile(s, Tiling{16, 32, 4, 2});
  EXPECT_FALSE(k.cubin.empty());
  EXPECT_EQ(k.spill_bytes, 0);
  const std::vector<CompiledKernel> helpers = rt.compile_helpers(s);
  ASSERT_EQ(helpers.size(), 5u);
  EXPECT_EQ(helpers[0].kernel_name, "qattn_combine_f16_d128");
  EXPECT_EQ(helpers[1].kernel_name, "qattn_kvappend_i4grp_f16_d128_paged");
  EXPECT_EQ(helpers[2].kernel_name, "qattn_kvgather_i4grp_f16_d128_paged");
  EXPECT_EQ(helpers[3].kernel_name, "qattn_kvsmooth_f16_d128__mean");     // K smoothing of the cache
  EXPECT_EQ(helpers[4].kernel_name, "qattn_kvsmooth_f16_d128__lsefix");
  for (const CompiledKernel& h : helpers) EXPECT_EQ(h.spill_bytes, 0) << h.kernel_name;
  // The prefill entry points refuse a decode spec with the way to run it.
  try {
    rt.tune(s, parse_problem("b=1,hq=4,hkv=1,q=1,kv=64"));
    FAIL() << "tune() accepted a decode spec";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::bad_input || e.kind() == ErrorKind::no_gpu) << e.what();
  }
}

// K smoothing of a cache (KvCacheView::k_mean): the calls refuse what cannot work before reaching a GPU.
TEST(KvSmoothingChecks, RefusedWithoutAGpu) {
  RuntimeOptions o;
  o.use_cache = false;
  Runtime rt(o);
  alignas(16) static unsigned char cache[2][4096];
  alignas(16) static float mean[2 * 128];
  static int table[1] = {0};
  KvCacheView view;
  view.k = cache[0];
  view.v = cache[1];
  view.capacity = 8;
  view.k_mean = mean;
  AppendKvCall append;
  append.spec = parse_spec("decode qk=fp16 pv=fp16 out=fp16 d=128 arch=sm_90a");
  append.heads_kv = 2;
  append.k = append.v = cache[0];
  append.start = table;
  append.cache = view;
  test::expect_bad_input([&] { rt.append_kv(append, nullptr); }, "k_mean (K smoothing) applies to a quantized K cache");
  append.spec = parse_spec("decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 arch=sm_90a");
  append.cache.k_mean = nullptr;
  append.init_k_mean = true;
  test::expect_bad_input([&] { rt.append_kv(append, nullptr); }, "init_k_mean sets cache.k_mean, which is null");
  append.cache.k_mean = reinterpret_cast<float*>(reinterpret_cast<char*>(mean) + 2);
  test::expect_bad_input([&] { rt.append_kv(append, nullptr); }, "k_mean must be a 4-byte aligned");

  DecodeCall call;
  call.spec = parse_spec("decode qk=bf16 pv=bf16 out=bf16 d=128 arch=sm_90a");
  call.problem = Problem{1, 2, 2, 1, 8};
  call.q = call.o = cache[0];
  call.kv_lens = table;
  call.cache = view;
  test::expect_bad_input([&] { rt.decode(call, nullptr); }, "a bf16 cache stores K as given");
  call.spec = parse_spec("decode qk=flashq:per_channel pv=flashq:per_channel out=fp16 d=128 arch=sm_90a");
  test::expect_bad_input([&] { rt.decode(call, nullptr); }, "a flashq cache has no K smoothing vector");
}

}  // namespace
}  // namespace qattn
