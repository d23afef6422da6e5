// Decode plans (Runtime::plan_decode): a plan made for a cache's capacity runs any lengths below it with
// the bits of decode() on the same problem; as pointers and lengths change between runs (the plan's own
// graph updated in place), on a caller's workspace on a second stream, and captured into the caller's
// CUDA graph as the plan's first run. Ragged batches over contiguous and paged caches, several splits
// (the combine), and unified_max (its row flags in the plan's workspace).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"
#include "tests/runtime/filled_cache.hpp"

namespace qattn {
namespace {

class DecodePlanRun : public test::GpuTest {};

struct Case {
  const char* spec;
  int page_size;
  int splits;   // 0: the runtime's choice for the capacity
};

TEST_F(DecodePlanRun, RunsGiveDecodeBitsAsLengthsPointersAndStreamsChange) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);
  for (const Case& c : {Case{"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 causal", 0, 0},
                        Case{"decode qk=fp16 pv=fp16 out=fp16 d=64 gqa=8", 0, 8},
                        Case{"decode qk=int4:per_group pv=int4:per_group out=bf16 d=128 gqa=4 causal paged", 16, 0},
                        Case{"decode qk=int8:per_token pv=int8:per_token out=bf16 d=128 gqa=4 softmax=unified_max paged", 16, 3}}) {
    SCOPED_TRACE(c.spec);
    RuntimeOptions options;
    options.use_cache = false;
    Runtime runtime(options);
    const Spec spec = runtime.resolve(parse_spec(c.spec));
    const int d = spec.head_dim, heads_kv = 2, heads_q = heads_kv * spec.gqa, capacity = 2048, batch = 3;
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_note(seed));
    const Fmt io = spec.out;
    test::FilledCache cache = test::filled_cache(runtime, spec, batch, heads_kv, capacity, c.page_size, capacity, seed);
    const size_t q_elems = static_cast<size_t>(batch) * heads_q * d;
    rt::DeviceBuffer q = rt::DeviceBuffer::from(test::random_bits(static_cast<size_t>(batch) * heads_q, d, io, seed + 2, false));
    rt::DeviceBuffer lens = rt::DeviceBuffer::from(std::vector<int>{1, 17, 1500});
    rt::DeviceBuffer o_eager(q_elems * 2), o_plan(q_elems * 2), lse_eager(batch * heads_q * sizeof(float)),
        lse_plan(batch * heads_q * sizeof(float));

    DecodeCall call;
    call.spec = spec;
    call.problem = Problem{batch, heads_q, heads_kv, 1, capacity};
    call.q = q.as<void>();
    call.cache = cache.view;
    call.kv_lens = lens.as<int>();
    call.splits = c.splits;
    DecodeCall shape = call;   // what a plan is made from: no pointers
    shape.q = nullptr;
    shape.cache.k = shape.cache.v = nullptr;
    shape.cache.block_table = nullptr;
    shape.kv_lens = nullptr;

    std::vector<std::uint16_t> o_poison(q_elems);
    test::fill_nan(o_poison, io);
    std::vector<float> lse_poison(static_cast<size_t>(batch) * heads_q);
    test::fill_nan(lse_poison);
    auto eager = [&](void* stream) {
      o_eager.upload(o_poison.data(), o_eager.size());
      lse_eager.upload(lse_poison.data(), lse_eager.size());
      call.o = o_eager.as<void>();
      call.lse = lse_eager.as<float>();
      runtime.decode(call, stream);
    };
    auto run_of_call = [&](void* workspace) {
      DecodeRun r;
      r.q = call.q;
      r.o = o_plan.as<void>();
      r.lse = lse_plan.as<float>();
      r.k_cache = cache.view.k;
      r.v_cache = cache.view.v;
      r.block_table = cache.view.block_table;
      r.kv_lens = call.kv_lens;
      r.workspace = workspace;
      return r;
    };
    auto differing = [&](const char* what) {
      rt::synchronize_device(0);
      const std::vector<std::uint16_t> a = o_eager.to_vector<std::uint16_t>(), b = o_plan.to_vector<std::uint16_t>();
      const std::vector<float> la = lse_eager.to_vector<float>(), lb = lse_plan.to_vector<float>();
      size_t differ = 0, non_finite = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        differ += a[i] != b[i];
        non_finite += !std::isfinite(test::half_bits_to_double(b[i], io));
      }
      for (size_t i = 0; i < la.size(); ++i) differ += !(la[i] == lb[i]);
      std::printf("[ decode plan ] %-82s %-34s %zu values differ, %zu non-finite\n", c.spec, what, differ, non_finite);
      EXPECT_EQ(non_finite, 0u) << what;
      return differ;
    };
    auto poison_plan = [&] {
      o_plan.upload(o_poison.data(), o_plan.size());
      lse_plan.upload(lse_poison.data(), lse_plan.size());
    };

    std::unique_ptr<DecodePlan> plan = runtime.plan_decode(shape);
    EXPECT_EQ(plan->splits(), runtime.decode_route(call).splits);
    EXPECT_EQ(plan->kernel_name(), runtime.decode_route(call).kernel_name);
    EXPECT_EQ(plan->workspace_bytes() > 0, plan->splits() > 1 || spec.softmax == SoftmaxMode::unified_max);
    // 1. The lengths the plan was not made for, the call's pointers.
    eager(nullptr);
    poison_plan();
    runtime.run(*plan, run_of_call(nullptr), nullptr);
    EXPECT_EQ(differing("first run"), 0u);
    // 2. Other lengths, other queries and another output: the plan's graph updated in place.
    lens.upload(std::vector<int>{1200, 3, 2048}.data(), 3 * sizeof(int));
    q.upload(test::random_bits(static_cast<size_t>(batch) * heads_q, d, io, seed + 3, false).data(), q.size());
    rt::DeviceBuffer q2 = rt::DeviceBuffer::from(test::random_bits(static_cast<size_t>(batch) * heads_q, d, io, seed + 3, false));
    eager(nullptr);
    poison_plan();
    DecodeRun moved = run_of_call(nullptr);
    moved.q = q2.as<void>();
    runtime.run(*plan, moved, nullptr);
    EXPECT_EQ(differing("new lengths, q and o"), 0u);
    // 3. A plan on the caller's workspace, captured as its first run on a second stream, then replayed.
    std::unique_ptr<DecodePlan> lent = runtime.plan_decode(shape, /*own_workspace=*/false);
    ASSERT_EQ(lent->workspace_bytes(), plan->workspace_bytes());
    rt::DeviceBuffer workspace(std::max<size_t>(lent->workspace_bytes(), 256));
    rt::Stream stream;
    const auto& drv = rt::driver();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    rt::check(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    runtime.run(*lent, run_of_call(lent->workspace_bytes() ? workspace.as<void>() : nullptr), stream.get());
    rt::check(drv.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    rt::check(drv.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    lens.upload(std::vector<int>{640, 2047, 64}.data(), 3 * sizeof(int));
    eager(nullptr);
    poison_plan();
    rt::synchronize_device(0);
    rt::check(drv.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    EXPECT_EQ(differing("captured first run, replayed"), 0u);
    drv.cuGraphExecDestroy(exec);
    drv.cuGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace qattn
