// One decode step (append the new token's K/V into the cache, then decode over it) in a CUDA graph:
// after an eager step on the stream, the captured step replays on the next token's inputs and positions
// (written into the captured buffers) with the bits of the same step run eagerly; a first-time call under
// capture is refused without breaking the capture. Contiguous int8 and fp16 caches, a paged int4
// per_group cache; a ragged batch, split over several CTAs (the combine kernel and its workspace run too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"
#include "tests/runtime/filled_cache.hpp"

namespace qattn {
namespace {

class DecodeGraph : public test::GpuTest {};

// The device state of a decode step: caches, positions, this step's token and query, outputs.
struct Step {
  rt::DeviceBuffer k_new, v_new, q, o, lse, start, lens;
  AppendKvCall append;
  DecodeCall decode;
};

using test::random_bits;

TEST_F(DecodeGraph, AppendAndDecodeReplayTheNextTokenWithTheEagerBits) {
  if (!rt::driver().cuStreamBeginCapture || !rt::driver().cuGraphInstantiate)
    GTEST_SKIP() << "this driver has no stream capture entry points";
  rt::ContextGuard context(0);
  struct Case {
    const char* spec;
    int page_size;
  };
  for (const Case& c : {Case{"decode qk=int8:per_token pv=int8:per_token out=fp16 d=128 gqa=4 causal", 0},
                        Case{"decode qk=fp16 pv=fp16 out=fp16 d=64 gqa=8", 0},
                        Case{"decode qk=int4:per_group pv=int4:per_group out=bf16 d=128 gqa=4 causal paged", 16}}) {
    SCOPED_TRACE(c.spec);
    RuntimeOptions options;
    options.use_cache = false;
    Runtime runtime(options);
    const Spec spec = runtime.resolve(parse_spec(c.spec));
    const int d = spec.head_dim, heads_kv = 2, heads_q = heads_kv * spec.gqa, capacity = 2048;
    const std::vector<int> lens = {1, 17, 1500};   // tokens already cached per sequence
    const int batch = static_cast<int>(lens.size());
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_note(seed));
    const Fmt io = spec.out;

    test::FilledCache cache = test::filled_cache(runtime, spec, batch, heads_kv, capacity, c.page_size, 1500, seed);
    const KvCacheView& view = cache.view;
    Step s;
    const size_t token_elems = static_cast<size_t>(batch) * heads_kv * d;
    s.k_new = rt::DeviceBuffer::from(random_bits(static_cast<size_t>(batch) * heads_kv, d, io, seed + 2, true));
    s.v_new = rt::DeviceBuffer::from(random_bits(static_cast<size_t>(batch) * heads_kv, d, io, seed + 3, false));
    s.q = rt::DeviceBuffer::from(random_bits(static_cast<size_t>(batch) * heads_q, d, io, seed + 4, false));
    s.o = rt::DeviceBuffer(static_cast<size_t>(batch) * heads_q * d * 2);
    s.lse = rt::DeviceBuffer(static_cast<size_t>(batch) * heads_q * sizeof(float));
    s.start = rt::DeviceBuffer::from(lens);
    std::vector<int> lens_after(lens);
    for (int& n : lens_after) ++n;
    s.lens = rt::DeviceBuffer::from(lens_after);
    s.append.spec = spec;
    s.append.batch = batch;
    s.append.heads_kv = heads_kv;
    s.append.n_new = 1;
    s.append.k = s.k_new.as<void>();
    s.append.v = s.v_new.as<void>();
    s.append.cache = view;
    s.append.start = s.start.as<int>();
    s.decode.spec = spec;
    s.decode.problem = Problem{batch, heads_q, heads_kv, 1, capacity};
    s.decode.q = s.q.as<void>();
    s.decode.o = s.o.as<void>();
    s.decode.cache = view;
    s.decode.kv_lens = s.lens.as<int>();
    s.decode.lse = s.lse.as<float>();
    s.decode.splits = 8;   // several CTAs per sequence: the combine kernel and the partials' workspace

    rt::Stream stream;
    const auto& drv = rt::driver();
    // Under capture before any eager run: refused, the capture still whole.
    {
      rt::check(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
      try {
        runtime.decode(s.decode, stream.get());
        ADD_FAILURE() << "a first-time decode under capture was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::bad_input);
        EXPECT_NE(std::string(e.what()).find("run it once eagerly on the same stream first"), std::string::npos) << e.what();
      }
      CUgraph empty = nullptr;
      EXPECT_EQ(drv.cuStreamEndCapture(stream.get(), &empty), CUDA_SUCCESS);
      if (empty) drv.cuGraphDestroy(empty);
    }
    auto step = [&] {
      runtime.append_kv(s.append, stream.get());
      runtime.decode(s.decode, stream.get());
    };
    step();   // eager: loads the kernels, sizes the workspace
    stream.synchronize();

    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    rt::check(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    step();
    rt::check(drv.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    rt::check(drv.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");

    // The next token: new K/V and query, positions one further, the caches as the eager step left them.
    for (int& n : lens_after) ++n;
    std::vector<int> start_next(lens);
    for (int& n : start_next) ++n;
    s.k_new.upload(random_bits(static_cast<size_t>(batch) * heads_kv, d, io, seed + 5, true).data(), token_elems * 2);
    s.v_new.upload(random_bits(static_cast<size_t>(batch) * heads_kv, d, io, seed + 6, false).data(), token_elems * 2);
    s.q.upload(random_bits(static_cast<size_t>(batch) * heads_q, d, io, seed + 7, false).data(), s.q.size());
    s.start.upload(start_next.data(), start_next.size() * sizeof(int));
    s.lens.upload(lens_after.data(), lens_after.size() * sizeof(int));
    const std::vector<unsigned char> k_before = cache.k.to_vector<unsigned char>(), v_before = cache.v.to_vector<unsigned char>();
    std::vector<std::uint16_t> o_poison(s.o.size() / 2);
    test::fill_nan(o_poison, io);
    std::vector<float> lse_poison(s.lse.size() / sizeof(float));
    test::fill_nan(lse_poison);
    auto poison = [&] {
      s.o.upload(o_poison.data(), s.o.size());
      s.lse.upload(lse_poison.data(), s.lse.size());
    };
    poison();
    rt::check(drv.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    const std::vector<std::uint16_t> o_replay = s.o.to_vector<std::uint16_t>();
    const std::vector<float> lse_replay = s.lse.to_vector<float>();
    const std::vector<unsigned char> k_replay = cache.k.to_vector<unsigned char>();
    // The same step eagerly, from the same cache state.
    cache.k.upload(k_before.data(), k_before.size());
    cache.v.upload(v_before.data(), v_before.size());
    poison();
    step();
    stream.synchronize();
    const std::vector<std::uint16_t> o_eager = s.o.to_vector<std::uint16_t>();
    const std::vector<float> lse_eager = s.lse.to_vector<float>();
    size_t differ = 0;
    for (size_t i = 0; i < o_eager.size(); ++i) differ += o_eager[i] != o_replay[i];
    for (size_t i = 0; i < lse_eager.size(); ++i) differ += !(lse_eager[i] == lse_replay[i]);
    const bool cache_same = k_replay == cache.k.to_vector<unsigned char>();
    size_t non_finite = 0;
    for (std::uint16_t bits : o_replay) non_finite += !std::isfinite(test::half_bits_to_double(bits, io));
    std::printf("[ decode graph ] %-76s replay vs eager: %zu values differ, appended cache %s, %zu non-finite\n", c.spec,
                differ, cache_same ? "identical" : "DIFFERENT", non_finite);
    EXPECT_EQ(differ, 0u);
    EXPECT_TRUE(cache_same);
    EXPECT_EQ(non_finite, 0u);
    drv.cuGraphExecDestroy(exec);
    drv.cuGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace qattn
