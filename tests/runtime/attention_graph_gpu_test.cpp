// attention() inside CUDA graphs: captured after one eager run on the stream, a graph replays the call
// on new inputs (written into the captured buffers) with the same bits as an eager call; a first-time
// call under capture is refused without breaking the capture; and a later, larger call on the stream
// (a new workspace) leaves the captured graph reading a workspace that is still alive.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
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

class AttentionGraph : public test::GpuTest {};

// One captured graph of `call` on `stream`, instantiated.
struct Captured {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~Captured() {
    if (exec) rt::driver().cuGraphExecDestroy(exec);
    if (graph) rt::driver().cuGraphDestroy(graph);
  }
};

void capture(Runtime& runtime, const AttentionCall& call, rt::Stream& stream, Captured& out) {
  const auto& d = rt::driver();
  rt::check(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  runtime.attention(call, stream.get());
  rt::check(d.cuStreamEndCapture(stream.get(), &out.graph), "cuStreamEndCapture");
  rt::check(d.cuGraphInstantiate(&out.exec, out.graph, 0), "cuGraphInstantiate");
}

HostTensor download(const rt::DeviceBuffer& o, const HostTensor& like, Fmt io) {
  return test::decode(o.to_vector<std::uint16_t>().data(), like.shape, like.strides, io);
}

TEST_F(AttentionGraph, ReplaysOnNewInputsWithTheEagerBits) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);   // the graph calls act on the current context (the runtime's own pushes are scoped)
  for (const char* text : {"prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=2 smooth=kv",
                           "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=64 smooth=k",
                           "prefill qk=fp16 pv=fp16 out=fp16 d=128"}) {
    SCOPED_TRACE(text);
    RuntimeOptions options;
    options.use_cache = false;
    options.tune = false;
    Runtime runtime(options);
    const Spec spec = runtime.resolve(parse_spec(text));
    const Problem p{2, 4 * spec.gqa, 4, 777, 1000};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_note(seed));
    const test::AttentionCase first = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed);
    const test::AttentionCase second = test::attention_case(p, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed + 7);
    test::Uploaded in = test::upload_call(spec, p, first.q, first.k, first.v);
    std::vector<std::uint16_t> poison(static_cast<size_t>(test::storage_size(first.ref.shape, first.ref.strides)));
    test::fill_nan(poison, spec.out);
    rt::DeviceBuffer dout = rt::DeviceBuffer::from(poison);
    AttentionCall call = in.call;
    call.o = test::view_of(dout, first.ref);
    rt::Stream stream;

    // Under capture before any eager run: refused, and the capture is still whole (it ends cleanly).
    {
      const auto& d = rt::driver();
      rt::check(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
      try {
        runtime.attention(call, stream.get());
        ADD_FAILURE() << "a first-time call under capture was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::bad_input);
        EXPECT_NE(std::string(e.what()).find("run it once eagerly on the same stream first"), std::string::npos)
            << e.what();
      }
      CUgraph empty = nullptr;
      EXPECT_EQ(d.cuStreamEndCapture(stream.get(), &empty), CUDA_SUCCESS);
      if (empty) d.cuGraphDestroy(empty);
    }

    runtime.attention(call, stream.get());   // eager: compiles, loads, sizes the workspace
    stream.synchronize();
    const HostTensor eager_first = download(dout, first.ref, spec.out);
    EXPECT_GE(test::compare(first.ref, eager_first).cosine, 0.999);

    Captured g;
    capture(runtime, call, stream, g);
    // New inputs into the captured buffers, a poisoned output, then the replay.
    for (auto [buf, t] : {std::pair{&in.q, &second.q}, std::pair{&in.k, &second.k}, std::pair{&in.v, &second.v}}) {
      const std::vector<std::uint16_t> bits = test::encode(*t, spec.out);
      buf->upload(bits.data(), bits.size() * sizeof(std::uint16_t));
    }
    dout.upload(poison.data(), poison.size() * sizeof(std::uint16_t));
    rt::check(rt::driver().cuGraphLaunch(g.exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    const HostTensor replayed = download(dout, second.ref, spec.out);
    const test::ErrorMetrics m = test::compare(second.ref, replayed);
    std::printf("[ graph ] %-80s replay %s\n", text, m.report().c_str());
    EXPECT_EQ(m.nonfinite, 0);
    EXPECT_GE(m.cosine, 0.999) << m.report();
    dout.upload(poison.data(), poison.size() * sizeof(std::uint16_t));
    runtime.attention(call, stream.get());
    stream.synchronize();
    const HostTensor eager_second = download(dout, second.ref, spec.out);
    EXPECT_EQ(values_differ(replayed, eager_second), 0u) << "replay against an eager call on the same inputs";

    // A larger call grows the stream's workspace; the graph still reads the one it captured.
    const Problem big{2, 4 * spec.gqa, 4, 4000, 4000};
    const test::AttentionCase large = test::attention_case(big, spec.head_dim, spec.causal, Layout::bshd, spec.out, seed + 11);
    test::Uploaded in_big = test::upload_call(spec, big, large.q, large.k, large.v);
    rt::DeviceBuffer dbig(static_cast<size_t>(test::storage_size(large.ref.shape, large.ref.strides)) * 2);
    AttentionCall call_big = in_big.call;
    call_big.o = test::view_of(dbig, large.ref);
    runtime.attention(call_big, stream.get());
    dout.upload(poison.data(), poison.size() * sizeof(std::uint16_t));
    rt::check(rt::driver().cuGraphLaunch(g.exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    EXPECT_EQ(values_differ(download(dout, second.ref, spec.out), eager_second), 0u)
        << "replay after the stream's workspace grew";
  }
}

}  // namespace
}  // namespace qattn
