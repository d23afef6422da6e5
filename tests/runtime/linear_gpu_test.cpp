// Linear layers on the GPU: every dataflow (gemv, flat, gemm) and weight format (fp16/bf16, int8 per
// channel, int4 per group) against float64 C = A . W^T + bias, on odd M, N and K (tails of every tile),
// with and without split-K, strided A and C. A carries a few large channels (as activations do); the
// weights come from pack_linear_weight, and the reference uses the weights the kernel sees
// (unpacked_weight) and A rounded to its 16-bit type, so the only error left is the kernels' own
// (products in 16-bit after dequantization, fp32 sums, one rounding of C). C is poisoned first, and the
// columns past n (ldc > n) must stay poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qattn/linear.hpp"
#include "qattn/runtime.hpp"
#include "reference/metrics.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

struct LinearCase {
  std::string w;   // weight format
  Dataflow flow;
  int m, n, k;
  int splits;      // 0: the runtime's choice
  bool bias;
};

class LinearGpu : public test::GpuTest {};

// Runs one case; returns the metrics against float64 and checks that nothing past n was written.
reference::ErrorMetrics run_case(Runtime& rt, const LinearCase& c, Fmt type, std::uint64_t seed, std::string* route) {
  Spec spec = parse_spec(std::string("linear a=") + to_string(type) + " w=" + (c.w == "16bit" ? to_string(type) : c.w) +
                         " out=" + to_string(type) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                         (c.bias ? " bias" : ""));
  spec.flow = c.flow;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  // A: N(0, 1) with 4 channels x20 (activation outliers); W: N(0, 0.02) with one large weight per 16 rows.
  const long long lda = c.k + 8, ldc = c.n + 3;
  std::vector<double> a(static_cast<size_t>(c.m) * c.k);
  for (size_t i = 0; i < a.size(); ++i) {
    const int col = static_cast<int>(i % c.k);
    a[i] = g(rng) * (col % 97 == 5 ? 20.0 : 1.0);
  }
  std::vector<float> w(static_cast<size_t>(c.n) * c.k);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(0.02 * g(rng));
  for (int r = 0; r < c.n; r += 16) w[static_cast<size_t>(r) * c.k + (r * 31) % c.k] = 0.4f;
  std::vector<double> bias(c.n);
  for (double& b : bias) b = test::half_bits_to_double(test::to_half_bits(g(rng), type), type);

  std::vector<std::uint16_t> a_bits(static_cast<size_t>(c.m) * lda, 0);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.k; ++j) {
      a_bits[static_cast<size_t>(i) * lda + j] = test::to_half_bits(a[static_cast<size_t>(i) * c.k + j], type);
      a[static_cast<size_t>(i) * c.k + j] = test::half_bits_to_double(a_bits[static_cast<size_t>(i) * lda + j], type);
    }
  std::vector<std::uint16_t> bias_bits(c.n);
  for (int j = 0; j < c.n; ++j) bias_bits[j] = test::to_half_bits(bias[j], type);
  const PackedLinearWeight packed = pack_linear_weight(spec, w.data());

  // Float64 reference with the weights the kernel sees.
  std::vector<double> ref(static_cast<size_t>(c.m) * c.n);
  std::vector<double> wk(c.k);
  for (int j = 0; j < c.n; ++j) {
    for (int kk = 0; kk < c.k; ++kk) wk[kk] = unpacked_weight(spec, packed, j, kk);
    for (int i = 0; i < c.m; ++i) {
      double s = c.bias ? bias[j] : 0.0;
      const double* row = &a[static_cast<size_t>(i) * c.k];
      for (int kk = 0; kk < c.k; ++kk) s += row[kk] * wk[kk];
      ref[static_cast<size_t>(i) * c.n + j] = s;
    }
  }

  rt::DeviceBuffer da = rt::DeviceBuffer::from(a_bits), dw = rt::DeviceBuffer::from(packed.bytes);
  rt::DeviceBuffer dscale = rt::DeviceBuffer::from(packed.scale), dzero = rt::DeviceBuffer::from(packed.zero);
  rt::DeviceBuffer dbias = rt::DeviceBuffer::from(bias_bits);
  std::vector<std::uint16_t> c_bits(static_cast<size_t>(c.m) * ldc);
  test::fill_nan(c_bits, type);
  rt::DeviceBuffer dc = rt::DeviceBuffer::from(c_bits);

  LinearCall call;
  call.spec = spec;
  call.a = da.as<void>();
  call.lda = lda;
  call.weights.w = dw.as<void>();
  call.weights.scale = packed.scale.empty() ? nullptr : dscale.as<float>();
  call.weights.zero = packed.zero.empty() ? nullptr : dzero.as<float>();
  call.weights.bias = c.bias ? dbias.as<void>() : nullptr;
  call.c = dc.as<void>();
  call.ldc = ldc;
  call.m = c.m;
  call.splits = c.splits;
  const LinearRoute r = rt.linear_route(call);
  *route = r.kernel + " splits=" + std::to_string(r.splits);
  rt.linear(call, nullptr);
  rt::synchronize_device(0);
  const std::vector<std::uint16_t> got_bits = dc.to_vector<std::uint16_t>();
  std::vector<double> got(ref.size());
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) got[static_cast<size_t>(i) * c.n + j] = test::half_bits_to_double(got_bits[static_cast<size_t>(i) * ldc + j], type);
    for (long long j = c.n; j < ldc; ++j)
      EXPECT_TRUE(std::isnan(test::half_bits_to_double(got_bits[static_cast<size_t>(i) * ldc + j], type)))
          << *route << ": wrote column " << j << " of row " << i << " past n";
  }
  return reference::compare(ref, got);
}

TEST_F(LinearGpu, EveryDataflowAndFormatMatchesFloat64OnOddShapes) {
  Runtime rt;
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  std::vector<LinearCase> cases;
  for (const char* w : {"16bit", "int8:per_channel", "int4:per_group"}) {
    const bool int4 = std::string(w) == "int4:per_group";
    const int k_odd = int4 ? 640 : 1040, n_odd = 1001;   // K: not a multiple of any k tile; N: of any n tile
    for (int m : {1, 7, 9}) cases.push_back({w, Dataflow::gemv, m, n_odd, k_odd, 0, m == 7});
    for (int m : {1, 7, 9, 63, 65}) cases.push_back({w, Dataflow::flat, m, n_odd, k_odd, 0, m == 9});
    for (int m : {9, 65, 1000}) cases.push_back({w, Dataflow::gemm, m, n_odd, k_odd, 0, m == 65});
    // Split-K: forced on every flow, once with splits that leave a short last split.
    cases.push_back({w, Dataflow::gemv, 3, 257, int4 ? 2048 : 2064, 3, true});
    cases.push_back({w, Dataflow::flat, 8, 257, int4 ? 2048 : 2064, 5, false});
    cases.push_back({w, Dataflow::gemm, 130, 257, int4 ? 2048 : 2064, 2, true});
    cases.push_back({w, Dataflow::flat, 1, 4096, 4096, 0, false});   // the runtime's split choice at a real shape
    for (int m : {2, 20, 100}) cases.push_back({w, Dataflow::automatic, m, n_odd, k_odd, 0, false});   // chosen by m
  }
  for (Fmt type : {Fmt::fp16, Fmt::bf16})
    for (const LinearCase& c : cases) {
      std::string route;
      const reference::ErrorMetrics e = run_case(rt, c, type, seed + c.m * 131 + c.n, &route);
      SCOPED_TRACE(route + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
      std::printf("[ linear ] %s %s m=%d n=%d k=%d: %s\n", to_string(type), route.c_str(), c.m, c.n, c.k, e.report().c_str());
      EXPECT_EQ(e.nonfinite, 0);
      // C rounds once to 16 bits (bf16: 2^-9 relative); the 16-bit products of dequantized weights add less.
      EXPECT_GT(e.cosine, type == Fmt::bf16 ? 0.99995 : 0.999995);
      EXPECT_LT(e.rel_l2, type == Fmt::bf16 ? 6e-3 : 1.5e-3);
    }
}

// Split-K calls of other shapes on one stream share its workspace: a call whose tiles need more counters
// than the previous call had follows one that left fp32 partials past those counters. Each call must still
// find its counters at zero (they have a buffer of their own), in either order, again and again.
TEST_F(LinearGpu, SplitKCallsOfOtherShapesShareTheStreamWorkspace) {
  Runtime rt;
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  const LinearCase few_tiles{"int8:per_channel", Dataflow::flat, 1, 4096, 4096, 8, false};   // 32 tiles, 8 x 4096 partials
  const LinearCase many_tiles{"int4:per_group", Dataflow::gemv, 9, 1001, 640, 2, true};    // 252 tiles
  const LinearCase gemm{"16bit", Dataflow::gemm, 200, 257, 2064, 2, false};
  for (int round = 0; round < 2; ++round)
    for (const LinearCase& c : {few_tiles, many_tiles, few_tiles, gemm, many_tiles}) {
      std::string route;
      const reference::ErrorMetrics e = run_case(rt, c, Fmt::fp16, seed + round, &route);
      std::printf("[ linear ] shared workspace, round %d: %s %s\n", round, route.c_str(), e.report().c_str());
      EXPECT_EQ(e.nonfinite, 0) << route;
      EXPECT_LT(e.rel_l2, 1.5e-3) << route;
    }
}

// The split-K counters are left at zero by every call: the same call again, and the same tiles with
// another split count, give the same result as one split would, bit for bit across repeats.
TEST_F(LinearGpu, SplitKIsDeterministicAndLeavesItsCountersClean) {
  Runtime rt;
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  for (Dataflow flow : {Dataflow::gemv, Dataflow::flat, Dataflow::gemm}) {
    const LinearCase c{"int8:per_channel", flow, flow == Dataflow::gemm ? 96 : 5, 777, 4096, 6, true};
    std::string r1, r2;
    const reference::ErrorMetrics a = run_case(rt, c, Fmt::fp16, seed, &r1);
    const reference::ErrorMetrics b = run_case(rt, c, Fmt::fp16, seed, &r2);
    EXPECT_EQ(a.max_abs, b.max_abs) << r1;
    EXPECT_EQ(a.rel_l2, b.rel_l2) << r1;
    EXPECT_LT(a.rel_l2, 1.5e-3) << r1;
  }
}

// A plan gives linear()'s bits, over its m and fewer tokens, with its own workspace or the caller's, and its
// first run may be captured in a CUDA graph whose replay reads new inputs.
TEST_F(LinearGpu, PlanRunsWithTheBitsOfLinearAndItsFirstRunCaptures) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);
  Runtime rtm;
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const char* w : {"fp16", "int8:per_channel", "int4:per_group"})
    for (const char* flow : {"gemv", "flat", "gemm"}) {
      const int m = std::string(flow) == "gemm" ? 200 : 6, n = 777, k = 2048;
      const Spec spec = parse_spec(std::string("linear a=fp16 w=") + w + " out=fp16 n=777 k=2048 bias flow=" + flow);
      std::vector<float> wf(static_cast<size_t>(n) * k);
      for (float& x : wf) x = 0.02f * g(rng);
      const PackedLinearWeight packed = pack_linear_weight(spec, wf.data());
      const auto random_bits = [&](size_t count) {
        std::vector<std::uint16_t> v(count);
        for (auto& x : v) x = test::to_half_bits(g(rng), Fmt::fp16);
        return v;
      };
      rt::DeviceBuffer a = rt::DeviceBuffer::from(random_bits(static_cast<size_t>(m) * k));
      const std::vector<std::uint16_t> a2 = random_bits(static_cast<size_t>(m) * k);
      rt::DeviceBuffer dw = rt::DeviceBuffer::from(packed.bytes), scale = rt::DeviceBuffer::from(packed.scale),
                       zero = rt::DeviceBuffer::from(packed.zero), bias = rt::DeviceBuffer::from(random_bits(n));
      rt::DeviceBuffer c_eager(static_cast<size_t>(m) * n * 2), c_plan(static_cast<size_t>(m) * n * 2);
      rt::synchronize_device(0);   // the uploads above ran on the legacy stream
      LinearCall call;
      call.spec = spec;
      call.a = a.as<void>();
      call.weights.w = dw.as<void>();
      call.weights.scale = packed.scale.empty() ? nullptr : scale.as<float>();
      call.weights.zero = packed.zero.empty() ? nullptr : zero.as<float>();
      call.weights.bias = bias.as<void>();
      call.c = c_eager.as<void>();
      call.m = m;
      call.splits = 3;   // split-K on every flow: the counters must come back to zero run after run
      LinearCall shape = call;   // a plan reads no pointer
      shape.a = shape.c = nullptr;
      shape.weights = LinearWeights{};
      const auto plan = rtm.plan_linear(shape);
      SCOPED_TRACE(plan->route().kernel);
      ASSERT_GT(plan->workspace_bytes(), 0u);
      LinearRun run;
      run.a = call.a;
      run.weights = call.weights;
      run.c = c_plan.as<void>();
      rt::Stream stream;
      const auto& d = rt::driver();
      CUgraph graph = nullptr;
      CUgraphExec exec = nullptr;
      rt::check(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
      rtm.run(*plan, run, stream.get());   // the plan's first run, captured
      rt::check(d.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
      rt::check(d.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
      a.upload(a2.data(), a2.size() * 2);   // the replay reads new activations
      c_plan.fill(0xff);
      rt::synchronize_device(0);   // the legacy-stream copy and fill, done before the non-blocking stream runs
      rt::check(d.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
      rt::check(d.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");   // and again: counters left clean
      rtm.linear(call, stream.get());
      stream.synchronize();
      EXPECT_EQ(c_plan.to_vector<std::uint16_t>(), c_eager.to_vector<std::uint16_t>()) << "graph replay against linear()";
      // Fewer tokens through the same plan, with the caller's zeroed workspace.
      rt::DeviceBuffer ws(plan->workspace_bytes());
      ws.fill(0);
      c_plan.fill(0xff);
      rt::synchronize_device(0);
      run.m = m - 1;
      run.workspace = ws.as<void>();
      rtm.run(*plan, run, stream.get());
      LinearCall fewer = call;
      fewer.m = m - 1;
      fewer.tiling = plan->route().tiling;
      rtm.linear(fewer, stream.get());
      stream.synchronize();
      const auto got = c_plan.to_vector<std::uint16_t>(), want = c_eager.to_vector<std::uint16_t>();
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + static_cast<long>(m - 1) * n, want.begin())) << "m - 1 tokens";
      for (size_t i = static_cast<size_t>(m - 1) * n; i < got.size(); ++i) ASSERT_EQ(got[i], 0xffff) << "wrote row m - 1";
      d.cuGraphExecDestroy(exec);
      d.cuGraphDestroy(graph);
    }
}

}  // namespace
}  // namespace qattn
