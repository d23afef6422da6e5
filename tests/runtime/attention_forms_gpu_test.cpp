// Kernel forms that must give the same bits as another form of the same kernel: the TMA loads (_tma)
// against every thread's cp.async, and the warp-specialized form (_ws, one or two consumer warpgroups)
// against the TMA form of the same tile shape; on every length, layout and mask of kCases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "generator/search_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "tests/common/attention_case.hpp"
#include "tests/common/attention_runs.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/metrics.hpp"

namespace qattn {
namespace {

using test::Case;
using test::HostTensor;
using test::kCases;
using test::run_poisoned;
using test::upload_call;
using test::Uploaded;
using test::values_differ;

// Default tilings, nothing cached: each test names the forms it compares.
RuntimeOptions untuned() {
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;
  return options;
}

// The TMA form (_tma: K / V^T tiles as tensor-map boxes on an mbarrier) reads the same bytes into the
// same shared-memory layout as every thread's cp.async, so its output is bit-identical to the cp.async
// form of the same tiling (plain and fused-Q), on every length, layout and mask of kCases; and it meets
// the reference floor. Batch and heads > 1 check the maps' (batch, head) origins, 17 / 63 / 65 / 1000 /
// 4097 keys the last tile's rows past kv_len (the next head's K rows, zero-filled V^T tokens).
class AttentionTma : public test::GpuTest {};

TEST_F(AttentionTma, SameBitsAsTheCpAsyncLoads) {
  Runtime runtime(untuned());
  rt::Stream stream;
  const char* specs[] = {
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 smooth=kv",
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal gqa=2 smooth=kv",
      "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=128 causal gqa=4 smooth=k",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=kv",
      "prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=64 smooth=kv",
      "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 causal smooth=k",
      "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
  };
  int turn = 0;
  for (const char* text : specs) {
    const Spec spec = runtime.resolve(parse_spec(text));
    const Tiling plain = default_tiling(spec, default_limits(spec.arch));
    const Tiling tma = tma_form(spec, plain, default_limits(spec.arch));
    if (!tma.tma) GTEST_SKIP() << "no TMA form on this GPU (" << to_string(spec.arch) << "): it needs sm_90a";
    const Tiling fused = fused_q_form(spec, plain, default_limits(spec.arch));
    const Tiling fused_tma = tma_form(spec, fused, default_limits(spec.arch));
    for (int n = 0; n < 4; ++n) {   // a different sample of the cases per spec
      const Case& c = kCases[static_cast<size_t>(turn++) % (sizeof(kCases) / sizeof(kCases[0]))];
      const Problem p{c.batch, c.heads_kv * spec.gqa, c.heads_kv, c.q_len, c.kv_len};
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(to_string(spec) + " " + to_string(p) + " " + test::to_string(c.layout) + " " + test::seed_note(seed));
      const test::AttentionCase data = test::attention_case(p, spec.head_dim, spec.causal, c.layout, spec.out, seed);
      const Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
      const std::pair<Tiling, Tiling> pairs[] = {{plain, tma}, {fused, fused_tma}};
      std::vector<HostTensor> cp_async_out;
      for (const auto& [cp_async, tma_form_] : pairs) {
        const HostTensor a = run_poisoned(runtime, in.call, data.ref, cp_async, stream);
        cp_async_out.push_back(a);
        const HostTensor b = run_poisoned(runtime, in.call, data.ref, tma_form_, stream);
        const size_t differ = values_differ(a, b);
        const test::ErrorMetrics m = test::compare(data.ref, b);
        std::printf("[ metrics ] %-34s %-26s %s, %zu values differ from %s\n", to_string(tma_form_).c_str(),
                    (to_string(p) + " " + test::to_string(c.layout)).c_str(), m.report().c_str(), differ,
                    to_string(cp_async).c_str());
        EXPECT_EQ(differ, 0u) << to_string(tma_form_) << " against " << to_string(cp_async);
        EXPECT_EQ(m.nonfinite, 0) << to_string(tma_form_);
        if (spec.qk.fmt == Fmt::int8) {
          EXPECT_GE(m.cosine, 0.999) << to_string(tma_form_) << " " << m.report();
        }
      }
      // e4m3 Q codes from the prologue are the Q pass's bit for bit (the same fp32 product and conversion;
      // int8's may differ by one code at exact ties).
      if (spec.qk.fmt == Fmt::fp8e4m3 && fused.q_fused) {
        EXPECT_EQ(values_differ(cp_async_out[0], cp_async_out[1]), 0u) << to_string(fused) << " against " << to_string(plain);
      }
    }
  }
}

Tiling persistent(Tiling t) {
  t.persistent = true;
  return t;
}

// The warp-specialized form (_ws) runs the same per-row arithmetic in the same order as the TMA form of
// the same tile shape (the deferred shift of O adds tile t - 1 before shifting, as the other form does
// before adding tile t), and two consumer warpgroups taking turns do what one does for each half of
// their rows (a fully masked tile adds exact zeros): so bit-identical outputs, on odd lengths, GQA and
// causal q_len != kv_len. The persistent form (_ps) computes each tile as one CTA of _ws does.
class AttentionWarpSpecialized : public test::GpuTest {};

TEST_F(AttentionWarpSpecialized, SameBitsAsTheTmaFormWithOneOrTwoConsumerWarpgroups) {
  Runtime runtime(untuned());
  rt::Stream stream;
  const char* specs[] = {
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64 causal gqa=2 smooth=kv",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=kv",
      "prefill qk=int8:per_block pv=int8:per_channel out=fp16 d=128 smooth=k",
      "prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k",
      "prefill qk=fp8e4m3:per_block pv=fp8e4m3:per_channel out=bf16 d=128 causal smooth=kv",
  };
  const auto form = [](int bm, int warps, bool ws) {
    Tiling t{bm, 128, warps, 2, true};
    t.tma = true;
    t.warp_specialized = ws;
    return t;
  };
  int turn = 0;
  for (const char* text : specs) {
    const Spec spec = runtime.resolve(parse_spec(text));
    if (spec.arch != Arch::sm_90a) GTEST_SKIP() << "no warp-specialized form on " << to_string(spec.arch) << ": it needs sm_90a";
    for (int n = 0; n < 3; ++n) {
      const Case& c = kCases[static_cast<size_t>(turn++) % (sizeof(kCases) / sizeof(kCases[0]))];
      const Problem p{c.batch, c.heads_kv * spec.gqa, c.heads_kv, c.q_len, c.kv_len};
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(to_string(spec) + " " + to_string(p) + " " + test::to_string(c.layout) + " " + test::seed_note(seed));
      const test::AttentionCase data = test::attention_case(p, spec.head_dim, spec.causal, c.layout, spec.out, seed);
      const Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
      const HostTensor tma = run_poisoned(runtime, in.call, data.ref, form(64, 4, false), stream);
      for (const Tiling& ws : {form(64, 4, true), form(128, 8, true), persistent(form(64, 4, true)),
                               persistent(form(128, 8, true))}) {
        const HostTensor out = run_poisoned(runtime, in.call, data.ref, ws, stream);
        const test::ErrorMetrics m = test::compare(data.ref, out);
        std::printf("[ metrics ] %-30s %-26s %s\n", to_string(ws).c_str(),
                    (to_string(p) + " " + test::to_string(c.layout)).c_str(), m.report().c_str());
        EXPECT_EQ(values_differ(out, tma), 0u) << to_string(ws) << " against " << to_string(form(64, 4, false));
        EXPECT_EQ(m.nonfinite, 0) << to_string(ws);
      }
    }
  }
}

// A persistent launch (_ps) where every CTA loops over several query tiles (more tiles than the GPU holds
// CTAs: 2 x 32 heads x 16 or 32 tiles), so the ring of stages and its barrier phases run on from tile to
// tile and the next Q tile loads during an epilogue: the bits of the one-tile-per-CTA form, the LSE too,
// causal and not, GQA, q_len != kv_len, both consumer shapes.
TEST_F(AttentionWarpSpecialized, PersistentCtasLoopingOverManyTilesGiveTheSameBits) {
  Runtime runtime(untuned());
  rt::Stream stream;
  const char* specs[] = {
      "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k",
      "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=bf16 d=64 smooth=kv",
      "prefill qk=fp8e4m3:per_token pv=fp8e4m3:per_channel out=fp16 d=128 causal smooth=kv",
  };
  const int lengths[][2] = {{2047, 2047}, {1999, 2400}};
  int turn = 0;
  for (const char* text : specs) {
    const Spec spec = runtime.resolve(parse_spec(text));
    if (spec.arch != Arch::sm_90a) GTEST_SKIP() << "no persistent form on " << to_string(spec.arch) << ": it needs sm_90a";
    const int* len = lengths[turn++ % 2];
    const Problem p{2, 32, 32 / spec.gqa, len[0], len[1]};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(to_string(spec) + " " + to_string(p) + " " + test::seed_note(seed));
    const test::AttentionCase data = test::attention_case(p, spec.head_dim, spec.causal, test::Layout::bshd, spec.out, seed);
    Uploaded in = upload_call(spec, p, data.q, data.k, data.v);
    for (int warps : {4, 8}) {
      Tiling ws{16 * warps, 128, warps, 3, true};
      ws.tma = ws.warp_specialized = true;
      if (!validate(spec, ws, default_limits(spec.arch))) ws.stages = 2;
      const auto run = [&](const Tiling& t, std::vector<float>& lse) {
        rt::DeviceBuffer dlse =
            rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(p.batch) * p.heads_q * p.q_len, std::nanf("")));
        in.call.lse = dlse.as<float>();
        const HostTensor out = run_poisoned(runtime, in.call, data.ref, t, stream);
        lse = dlse.to_vector<float>();
        in.call.lse = nullptr;
        return out;
      };
      std::vector<float> lse_ws, lse_ps;
      const HostTensor a = run(ws, lse_ws);
      const HostTensor b = run(persistent(ws), lse_ps);
      const test::ErrorMetrics m = test::compare(data.ref, b);
      std::printf("[ metrics ] %-34s %-26s %s\n", to_string(persistent(ws)).c_str(), to_string(p).c_str(), m.report().c_str());
      EXPECT_EQ(values_differ(a, b), 0u) << to_string(persistent(ws)) << " against " << to_string(ws);
      EXPECT_EQ(m.nonfinite, 0);
      ASSERT_EQ(lse_ws.size(), lse_ps.size());
      size_t lse_differ = 0;
      for (size_t i = 0; i < lse_ws.size(); ++i) lse_differ += !(lse_ws[i] == lse_ps[i]);
      EXPECT_EQ(lse_differ, 0u) << "LSE of " << to_string(persistent(ws));
      EXPECT_GE(m.cosine, 0.99) << m.report();
    }
  }
}

}  // namespace
}  // namespace qattn
