// `qattn pretune` on a real GPU (issue 5): a small grid (one prefill spec, one decode family) tuned by
// the GPU worker, then the same grid again (everything resumed, nothing run), then a new Runtime on the
// same file (a restarted application): the same winners and decode decisions, and attention() calls
// on every prefill bucket (which launch the winners' fused-Q / TMA twins), with zero compiles and zero
// tuning.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "qattn/pretune.hpp"
#include "runtime/tuning/pretune_executor.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "tests/common/device_tensor.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/common/random_data.hpp"

namespace qattn {
namespace {

class Quiet final : public ProgressSink {
 public:
  void update(const ProgressState&) override {}
};

const char* kGrid = R"({"version": 1, "entries": [
  {"spec": "prefill qk=int8:per_token pv=int8:per_channel out=bf16 d=128 causal smooth=kv",
   "problems": {"batch": [1], "heads_q": [4], "q_len": [512, 2048]}},
  {"kind": "decode", "spec": "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128",
   "problems": {"batch": [1, 4], "heads_q": [4], "q_len": [1], "kv_len": [1024, 4096]}}]})";

class PretuneGpu : public test::GpuTestWithDir {};

TEST_F(PretuneGpu, SmallGridThenResumeThenRestartWithZeroCompiles) {
  const std::vector<PretuneItem> items = expand_grid(parse_pretune_grid(kGrid));
  ASSERT_EQ(items.size(), 3u) << "two prefill buckets and one decode sweep";
  rt::GpuPretuneOptions o;
  o.cache_path = (dir_ / "qattn.db").string();
  o.timing.repeats = 5;
  Quiet quiet;
  {
    rt::GpuPretuneWorker gpu(o);
    const PretuneSummary s = run_pretune(items, {&gpu}, {}, quiet);
    EXPECT_EQ(s.ran, 3u);
    EXPECT_EQ(s.failed, 0u);
    for (const ItemOutcome& out : s.outcomes) EXPECT_EQ(out.status, ItemStatus::ran) << out.key << ": " << out.detail;
  }
  {
    rt::GpuPretuneWorker gpu(o);   // a second run of the same command: everything is in the cache
    const PretuneSummary s = run_pretune(items, {&gpu}, {}, quiet);
    EXPECT_EQ(s.resumed, 3u);
    EXPECT_EQ(s.ran, 0u);
  }
  RuntimeOptions ro;
  ro.cache_path = o.cache_path;
  Runtime rt(ro);
  rt::Stream stream;
  for (const PretuneItem& item : items) {
    if (item.kind == Phase::prefill) {
      // What an application calls: attention() on fp16/bf16 tensors, output poisoned first.
      const Problem& p = item.problem;
      const Spec spec = rt.resolve(item.spec);
      const std::uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(to_string(p) + " " + test::seed_note(seed));
      const auto tensor = [&](int heads, int seq, const test::RandomSpec& r, std::uint64_t s) {
        return test::random_tensor({p.batch, heads, seq, spec.head_dim}, test::Layout::bshd, r, s);
      };
      const test::HostTensor q = tensor(p.heads_q, p.q_len, test::q_like(), seed),
                             k = tensor(p.heads_kv, p.kv_len, test::k_like(), seed + 1),
                             v = tensor(p.heads_kv, p.kv_len, test::v_like(), seed + 2);
      test::Uploaded in = test::upload_call(spec, p, q, k, v);
      std::vector<std::uint16_t> out(static_cast<size_t>(q.shape.numel()));
      test::fill_nan(out, spec.out);
      rt::DeviceBuffer o_dev = rt::DeviceBuffer::from(out);
      in.call.o = test::view_of(o_dev, q);
      rt.attention(in.call, stream.get());
      stream.synchronize();
      o_dev.download(out.data(), out.size() * sizeof(std::uint16_t));
      long long non_finite = 0;
      for (std::uint16_t x : out) non_finite += !std::isfinite(test::half_bits_to_double(x, spec.out));
      EXPECT_EQ(non_finite, 0);
      continue;
    }
    EXPECT_TRUE(rt.decode_tuned(item.spec));
    for (const Problem& p : item.sweep) {
      DecodeCall call;
      call.spec = item.spec;
      call.problem = p;
      const Runtime::DecodeRouteInfo route = rt.decode_route(call);
      EXPECT_GE(route.splits, 1);
    }
  }
  const RuntimeCounters c = rt.counters();
  EXPECT_EQ(c.compiles, 0);
  EXPECT_EQ(c.tunings, 0);
  EXPECT_EQ(c.tuned_db_hits, 2);
}

}  // namespace
}  // namespace qattn
