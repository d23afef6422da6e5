// Runtime::plan_attention and run(plan): a run gives attention()'s bits (output and LSE) with the plan's
// own workspace and with the caller's, on short calls (the one-pass passes, no fork) and long ones (the
// side streams); its runs, replayed as the plan's own CUDA graph, give the bits of runs enqueued one
// launch at a time as pointers and streams change; its first run can be captured in a caller's CUDA
// graph, whose replay on new inputs equals an eager run; and a run refuses what a plan cannot know (null, misaligned, another runtime's plan).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/registry/experiment_options.hpp"
#include "tests/common/attention_case.hpp"
#include "tests/common/attention_runs.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/metrics.hpp"

namespace qattn {
namespace {

using test::HostTensor;
using test::Layout;
using test::values_differ;

class AttentionPlanRun : public test::GpuRuntimeTest {};

const char* const kSpecs[] = {
    "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
    "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=64 smooth=k",
    "prefill qk=int8:per_block pv=fp8e4m3:per_channel out=fp16 d=128 smooth=qkv",
    "prefill qk=fp16 pv=fp16 out=fp16 d=128 causal",
};

struct Outputs {
  HostTensor o;
  std::vector<float> lse;
};

// A NaN-poisoned output and LSE shaped like `ref`.
struct Sink {
  rt::DeviceBuffer o, lse;
  std::vector<std::uint16_t> poison;
  Sink(const HostTensor& ref, const Problem& p, Fmt io)
      : poison(static_cast<size_t>(test::storage_size(ref.shape, ref.strides))) {
    test::fill_nan(poison, io);
    o = rt::DeviceBuffer::from(poison);
    lse = rt::DeviceBuffer::from(std::vector<float>(static_cast<size_t>(p.batch) * p.heads_q * p.q_len, std::nanf("")));
  }
  void repoison() {
    o.upload(poison.data(), poison.size() * sizeof(std::uint16_t));
    lse.fill(0xff);
  }
  Outputs read(const HostTensor& ref, Fmt io) const {
    return {test::decode(o.to_vector<std::uint16_t>().data(), ref.shape, ref.strides, io), lse.to_vector<float>()};
  }
};

size_t lse_differ(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += !(a[i] == b[i]);
  return n;
}

AttentionRun run_of(const AttentionCall& call, Sink& sink, void* workspace = nullptr) {
  AttentionRun r;
  r.q = call.q.data, r.k = call.k.data, r.v = call.v.data;
  r.o = sink.o.as<void>();
  r.lse = sink.lse.as<float>();
  r.workspace = workspace;
  return r;
}

TEST_F(AttentionPlanRun, RunsGiveTheBitsOfAttentionWithEitherWorkspace) {
  for (const char* text : kSpecs) {
    // 128 tokens: one-pass passes, no side streams; 3000: statistics passes on side streams.
    for (const Problem shape : {Problem{1, 8, 4, 128, 128}, Problem{2, 8, 4, 1500, 3000}}) {
      const Spec spec = runtime_->resolve(parse_spec(text));
      Problem p = shape;
      p.heads_q = p.heads_kv * spec.gqa;
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(std::string(text) + " " + to_string(p) + " " + test::seed_note(seed));
      const test::AttentionCase c = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed);
      test::Uploaded in = test::upload_call(spec, p, c.q, c.k, c.v);
      Sink sink(c.ref, p, spec.out);
      AttentionCall call = in.call;
      call.o = test::view_of(sink.o, c.ref);
      call.lse = sink.lse.as<float>();
      runtime_->attention(call, stream_->get());
      stream_->synchronize();
      const Outputs eager = sink.read(c.ref, spec.out);
      const test::ErrorMetrics m = test::compare(c.ref, eager.o);
      EXPECT_EQ(m.nonfinite, 0);
      EXPECT_GE(m.cosine, 0.999) << m.report();

      const auto own = runtime_->plan_attention(call);
      const auto lent = runtime_->plan_attention(call, /*own_workspace=*/false);
      EXPECT_EQ(own->workspace_bytes(), lent->workspace_bytes());
      EXPECT_EQ(own->workspace_bytes() == 0, !spec.quantized());
      rt::DeviceBuffer ws(lent->workspace_bytes() + 256);
      for (int round = 0; round < 2; ++round) {   // twice: a run leaves nothing the next depends on
        sink.repoison();
        runtime_->run(*own, run_of(call, sink), stream_->get());
        stream_->synchronize();
        const Outputs planned = sink.read(c.ref, spec.out);
        EXPECT_EQ(values_differ(planned.o, eager.o), 0u) << "own workspace, round " << round;
        EXPECT_EQ(lse_differ(planned.lse, eager.lse), 0u) << "own workspace, round " << round;
        sink.repoison();
        runtime_->run(*lent, run_of(call, sink, ws.as<char>() + 256 * round), stream_->get());
        stream_->synchronize();
        const Outputs given = sink.read(c.ref, spec.out);
        EXPECT_EQ(values_differ(given.o, eager.o), 0u) << "caller's workspace, round " << round;
        EXPECT_EQ(lse_differ(given.lse, eager.lse), 0u) << "caller's workspace, round " << round;
      }
      std::printf("[ plan ] %-80s %s: %s, workspace %zu B\n", text, to_string(p).c_str(), m.report().c_str(),
                  own->workspace_bytes());
    }
  }
}

TEST_F(AttentionPlanRun, TheFirstRunCapturesAndReplaysOnNewInputs) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);   // the graph calls act on the current context
  for (const char* text : kSpecs) {
    const Spec spec = runtime_->resolve(parse_spec(text));
    const Problem p{2, 4 * spec.gqa, 4, 300, 777};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const test::AttentionCase first = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed);
    const test::AttentionCase second = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed + 3);
    test::Uploaded in = test::upload_call(spec, p, first.q, first.k, first.v);
    Sink sink(first.ref, p, spec.out);
    AttentionCall call = in.call;
    call.o = test::view_of(sink.o, first.ref);
    rt::Stream stream;
    const auto plan = runtime_->plan_attention(call);
    const auto& d = rt::driver();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    rt::check(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    runtime_->run(*plan, run_of(call, sink), stream.get());   // never ran eagerly
    rt::check(d.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    rt::check(d.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    for (auto [buf, t] : {std::pair{&in.q, &second.q}, std::pair{&in.k, &second.k}, std::pair{&in.v, &second.v}}) {
      const std::vector<std::uint16_t> bits = test::encode(*t, spec.out);
      buf->upload(bits.data(), bits.size() * sizeof(std::uint16_t));
    }
    sink.repoison();
    rt::check(d.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    const Outputs replayed = sink.read(second.ref, spec.out);
    const test::ErrorMetrics m = test::compare(second.ref, replayed.o);
    std::printf("[ plan ] %-80s graph replay %s\n", text, m.report().c_str());
    EXPECT_EQ(m.nonfinite, 0);
    EXPECT_GE(m.cosine, 0.999) << m.report();
    sink.repoison();
    runtime_->run(*plan, run_of(call, sink), stream.get());
    stream.synchronize();
    const Outputs eager = sink.read(second.ref, spec.out);
    EXPECT_EQ(values_differ(replayed.o, eager.o), 0u) << "replay against an eager run on the same inputs";
    EXPECT_EQ(lse_differ(replayed.lse, eager.lse), 0u);
    d.cuGraphExecDestroy(exec);
    d.cuGraphDestroy(graph);
  }
}

// A run replays the plan's CUDA graph (runtime/device/launch_graph.hpp), updating the nodes whose
// pointers moved. Against a plan that enqueues its launches one by one: the same bits on every call,
// with the inputs, output, LSE and workspace changing between calls, on two streams, and back to back.
TEST_F(AttentionPlanRun, GraphRunsGiveTheBitsOfEnqueuedRunsAsPointersAndStreamsChange) {
  for (const char* text : {kSpecs[0], kSpecs[2], kSpecs[3]}) {
    const Spec spec = runtime_->resolve(parse_spec(text));
    const Problem p{1, 8 * spec.gqa, 8, 200, 200};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(text) + " " + test::seed_note(seed));
    const test::AttentionCase cases[2] = {
        test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed),
        test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed + 1)};
    test::Uploaded in[2] = {test::upload_call(spec, p, cases[0].q, cases[0].k, cases[0].v),
                            test::upload_call(spec, p, cases[1].q, cases[1].k, cases[1].v)};
    Sink sinks[2] = {Sink(cases[0].ref, p, spec.out), Sink(cases[1].ref, p, spec.out)};
    AttentionCall call = in[0].call;
    call.o = test::view_of(sinks[0].o, cases[0].ref);
    const auto graphed = runtime_->plan_attention(call, /*own_workspace=*/false);
    rt::experiment_options(*runtime_).plan_graphs = false;
    const auto enqueued = runtime_->plan_attention(call, /*own_workspace=*/false);
    rt::experiment_options(*runtime_).plan_graphs = true;
    rt::DeviceBuffer ws(2 * (graphed->workspace_bytes() + 256));
    rt::Stream other;
    void* streams[2] = {stream_->get(), other.get()};
    auto run = [&](const AttentionPlan& plan, int which, int stream, int slot) {
      AttentionCall c = in[which].call;
      c.o = test::view_of(sinks[which].o, cases[which].ref);
      sinks[which].repoison();
      const size_t offset = static_cast<size_t>(slot) * (graphed->workspace_bytes() + 256);
      runtime_->run(plan, run_of(c, sinks[which], ws.as<char>() + offset), streams[stream]);
      rt::check(rt::driver().cuStreamSynchronize(static_cast<CUstream>(streams[stream])), "cuStreamSynchronize");
      return sinks[which].read(cases[which].ref, spec.out);
    };
    const Outputs want[2] = {run(*enqueued, 0, 0, 0), run(*enqueued, 1, 0, 0)};
    for (int which = 0; which < 2; ++which) {
      const test::ErrorMetrics m = test::compare(cases[which].ref, want[which].o);
      EXPECT_GE(m.cosine, 0.999) << m.report();
    }
    const int calls[][3] = {{0, 0, 0}, {0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 1, 1}, {1, 1, 0}, {0, 0, 1}};
    for (const auto& [which, stream, slot] : calls) {
      const Outputs got = run(*graphed, which, stream, slot);
      EXPECT_EQ(values_differ(got.o, want[which].o), 0u) << "inputs " << which << ", stream " << stream << ", workspace " << slot;
      EXPECT_EQ(lse_differ(got.lse, want[which].lse), 0u) << "inputs " << which << ", stream " << stream;
    }
    // Back to back, no synchronization: each update lands while the graph's previous launch may still run.
    for (int which = 0; which < 2; ++which) sinks[which].repoison();
    for (int i = 0; i < 6; ++i) {
      const int which = i % 2;
      AttentionCall c = in[which].call;
      c.o = test::view_of(sinks[which].o, cases[which].ref);
      runtime_->run(*graphed, run_of(c, sinks[which], ws.as<char>() + which * (graphed->workspace_bytes() + 256)),
                    stream_->get());
    }
    stream_->synchronize();
    for (int which = 0; which < 2; ++which) {
      const Outputs got = sinks[which].read(cases[which].ref, spec.out);
      EXPECT_EQ(values_differ(got.o, want[which].o), 0u) << "back to back, inputs " << which;
      EXPECT_EQ(lse_differ(got.lse, want[which].lse), 0u) << "back to back, inputs " << which;
    }
  }
}

TEST_F(AttentionPlanRun, RefusesWhatAPlanCannotKnow) {
  const Spec spec = runtime_->resolve(parse_spec(kSpecs[0]));
  const Problem p{1, 4 * spec.gqa, 4, 64, 64};
  const test::AttentionCase c = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, test::fresh_seed());
  test::Uploaded in = test::upload_call(spec, p, c.q, c.k, c.v);
  Sink sink(c.ref, p, spec.out);
  AttentionCall call = in.call;
  call.o = test::view_of(sink.o, c.ref);
  const auto lent = runtime_->plan_attention(call, false);
  auto refused = [&](const AttentionPlan& plan, AttentionRun r, Runtime& by, const std::string& says) {
    try {
      by.run(plan, r, stream_->get());
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::bad_input);
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(*lent, run_of(call, sink), *runtime_, "pass workspace");
  AttentionRun r = run_of(call, sink);
  r.k = nullptr;
  refused(*lent, r, *runtime_, "got a null one");
  r = run_of(call, sink);
  r.q = static_cast<const char*>(r.q) + 2;
  refused(*lent, r, *runtime_, "16-byte aligned");
  rt::DeviceBuffer ws(lent->workspace_bytes() + 256);
  refused(*lent, run_of(call, sink, ws.as<char>() + 16), *runtime_, "256-byte aligned");
  r = run_of(call, sink, ws.as<void>());
  const int offsets[2] = {0, 64};
  rt::DeviceBuffer cu = rt::DeviceBuffer::from(std::vector<int>(offsets, offsets + 2));
  r.cu_seqlens_q = r.cu_seqlens_kv = cu.as<int>();
  refused(*lent, r, *runtime_, "pass no cu_seqlens");
  RuntimeOptions options;
  options.use_cache = false;
  options.tune = false;
  Runtime other(options);
  refused(*lent, run_of(call, sink, ws.as<void>()), other, "made by another Runtime");
}

}  // namespace
}  // namespace qattn
