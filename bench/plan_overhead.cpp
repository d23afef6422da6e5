// qattn_bench_plan: host cost of one prefill call at a small shape, from C++, where Python adds nothing:
// run(plan) against attention() (the one-shot path that decides everything per call), for an fp16 and
// two quantized specs, with the plan's graph (the default) and with its launches enqueued one by one;
// and the pieces a run is made of: each driver call of an enqueued quantized run, one kernel launch
// through the runtime's wrapper and raw, one memset. Host time: the wall time of issuing R calls back to back (no sync inside
// a round) over R, median of rounds; GPU time: events around the same R calls (the larger of the two is
// what a caller waits for when the host is not the bound).
//
//   qattn_bench_plan [--b 1] [--n 128] [--h 32] [--hkv 8] [--d 128] [--out result.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/safe_file.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/registry/experiment_options.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/tuning/host_data.hpp"

namespace {

using namespace qattn;
constexpr int kDevice = 0;
constexpr int kRounds = 30, kPerRound = 50;

struct Options {
  int b = 1, n = 128, h = 32, hkv = 8, d = 128;
  std::string out;
};

struct Timing {
  double host_us, gpu_us;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Timing measure(const std::function<void()>& call, rt::Stream& stream) {
  for (int i = 0; i < 20; ++i) call();
  stream.synchronize();
  rt::Event start(kDevice), end(kDevice);
  std::vector<double> host, gpu;
  for (int r = 0; r < kRounds; ++r) {
    stream.synchronize();
    start.record(stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerRound; ++i) call();
    const auto t1 = std::chrono::steady_clock::now();
    end.record(stream.get());
    stream.synchronize();
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kPerRound);
    gpu.push_back(static_cast<double>(end.elapsed_ms_since(start)) * 1e3 / kPerRound);
  }
  return {median(host), median(gpu)};
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--b") o.b = std::stoi(next());
    else if (a == "--n") o.n = std::stoi(next());
    else if (a == "--h") o.h = std::stoi(next());
    else if (a == "--hkv") o.hkv = std::stoi(next());
    else if (a == "--d") o.d = std::stoi(next());
    else if (a == "--out") o.out = next();
    else throw std::runtime_error("unknown option '" + a + "'; accepted: --b --n --h --hkv --d --out");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  RuntimeOptions ro;
  ro.use_cache = false;
  ro.tune = false;
  Runtime runtime(ro);
  rt::ContextGuard context(kDevice);
  rt::Stream stream(kDevice);
  std::mt19937_64 rng(7);
  auto upload = [&](int heads, int biased, int scaled) {
    const std::vector<float> x = rt::random_activations(rng, 1LL * o.b * o.n * heads, o.d, biased, scaled);
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) bits[i] = rt::to_bits(Fmt::fp16, x[i]);
    return rt::DeviceBuffer::from(bits, kDevice);
  };
  rt::DeviceBuffer dq = upload(o.h, 0, 4), dk = upload(o.hkv, 4, 0), dv = upload(o.hkv, 4, 0);
  rt::DeviceBuffer dout(static_cast<size_t>(o.b) * o.n * o.h * o.d * 2, kDevice);
  rt::DeviceBuffer dout2(static_cast<size_t>(o.b) * o.n * o.h * o.d * 2, kDevice);
  nlohmann::json rows = nlohmann::json::array();
  auto report = [&](const std::string& what, const Timing& t) {
    if (t.gpu_us < 0) {   // a single driver call: host time only
      std::printf("%-78s host %7.2f us\n", what.c_str(), t.host_us);
      rows.push_back({{"call", what}, {"host_us", t.host_us}, {"gpu_us", nullptr}});
    } else {
      std::printf("%-78s host %7.2f us   gpu %7.2f us\n", what.c_str(), t.host_us, t.gpu_us);
      rows.push_back({{"call", what}, {"host_us", t.host_us}, {"gpu_us", t.gpu_us}});
    }
    std::fflush(stdout);
  };

  const char* specs[] = {"prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
                         "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=kv",
                         "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=kv"};
  for (const char* text : specs) {
    AttentionCall call;
    call.spec = parse_spec(text);
    call.spec.head_dim = o.d;
    call.spec.gqa = o.h / o.hkv;
    call.problem = Problem{o.b, o.h, o.hkv, o.n, o.n};
    call.q = bshd(dq.as<void>(), o.n, o.h, o.d);
    call.k = bshd(dk.as<void>(), o.n, o.hkv, o.d);
    call.v = bshd(dv.as<void>(), o.n, o.hkv, o.d);
    call.o = bshd(dout.as<void>(), o.n, o.h, o.d);
    const std::string name = to_string(call.spec);
    report("attention() " + name, measure([&] { runtime.attention(call, stream.get()); }, stream));
    const auto plan = runtime.plan_attention(call);
    AttentionRun r;
    r.q = call.q.data, r.k = call.k.data, r.v = call.v.data, r.o = call.o.data;
    report("run(plan) " + name + " [" + plan->kernel().name() + "]",
           measure([&] { runtime.run(*plan, r, stream.get()); }, stream));
    AttentionRun moving = r;   // a new output pointer every call: the graph's nodes are updated each time
    bool flip = false;
    report("run(plan), the output alternating between two buffers", measure([&] {
             moving.o = (flip = !flip) ? dout2.as<void>() : dout.as<void>();
             runtime.run(*plan, moving, stream.get());
           }, stream));
    rt::experiment_options(runtime).plan_graphs = false;
    const auto direct = runtime.plan_attention(call);
    rt::experiment_options(runtime).plan_graphs = true;
    report("run(plan) with its launches enqueued one by one (QATTN_PLAN_GRAPHS=0)",
           measure([&] { runtime.run(*direct, r, stream.get()); }, stream));
    if (call.spec.quantized()) {
      const auto prepared = runtime.prepare(call, stream.get());
      report("run(prepared), the attention kernel alone, " + name,
             measure([&] { runtime.run(*prepared, call.o, 0.f, nullptr, stream.get()); }, stream));
      // What a run enqueues one by one without a graph, each driver call timed on its own.
      Runtime::Impl& impl = RuntimeAccess::impl(runtime);
      const Spec spec = runtime.resolve(call.spec);
      const Tiling tiling = impl.launch_form(spec, plan->kernel().tiling());
      const rt::AttentionStage st = impl.stage_attention(spec, call.problem, tiling, false);
      rt::DeviceBuffer ws(st.bytes, kDevice);
      Runtime::Impl::StageInputs in;
      in.x = {TensorRef{call.q.data, call.q.sb, call.q.sh, call.q.ss, 1}, TensorRef{call.k.data, call.k.sb, call.k.sh, call.k.ss, 1},
              TensorRef{call.v.data, call.v.sb, call.v.sh, call.v.ss, 1}};
      in.problem = call.problem;
      in.head_dim = o.d;
      {
        std::vector<std::vector<double>> each;
        std::vector<std::string> what;
        auto timed = [&](size_t slot, const std::string& label, const std::function<void()>& f) {
          if (each.size() <= slot) each.resize(slot + 1), what.resize(slot + 1);
          what[slot] = label;
          const auto t0 = std::chrono::steady_clock::now();
          f();
          each[slot].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        };
        for (int rep = 0; rep < kRounds * kPerRound; ++rep) {
          if (rep % kPerRound == 0) stream.synchronize();
          size_t slot = 0;
          if (st.zero_bytes)
            timed(slot++, "memset", [&] {
              rt::fill_bytes_async(reinterpret_cast<CUdeviceptr>(ws.as<char>() + st.zero_begin), 0, st.zero_bytes,
                                   stream.get(), kDevice);
            });
          for (size_t i = 0; i < 3; ++i)
            for (size_t j = 0; j < st.passes[i].size(); ++j) {
              const gen::QuantLaunch& l = st.slots[i].plan.launches[j];
              const QuantParams qp = impl.stage_quant_params(st.slots[i], in.x[i], ws.as<char>(), o.d, nullptr);
              timed(slot++, std::string("launch of pass ") + "qkv"[i] + " " + l.tag, [&] {
                st.passes[i][j]->launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1},
                                        l.smem_bytes, stream.get(), qp);
              });
            }
          timed(slot++, "run(prepared): the attention kernel's launch",
                [&] { runtime.run(*prepared, call.o, 0.f, nullptr, stream.get()); });
        }
        stream.synchronize();
        for (size_t i = 0; i < each.size(); ++i) report("one call: " + what[i], Timing{::median(each[i]), -1});
        }
    } else {
      // The fp16 plan is one launch: the same kernel through the runtime's wrapper and through the driver.
      const auto& k = dynamic_cast<const rt::LoadedKernel&>(plan->kernel());
      AttentionParams p{};
      p.batch = o.b, p.heads_q = o.h, p.heads_kv = o.hkv, p.q_len = o.n, p.kv_len = o.n;
      p.q = TensorRef{dq.as<void>(), call.q.sb, call.q.sh, call.q.ss, 1};
      p.k = TensorRef{dk.as<void>(), call.k.sb, call.k.sh, call.k.ss, 1};
      p.v = TensorRef{dv.as<void>(), call.v.sb, call.v.sh, call.v.ss, 1};
      p.o = TensorRef{dout.as<void>(), call.o.sb, call.o.sh, call.o.ss, 1};
      p.softmax_scale = 0.088f;
      p.band_heads = o.h;
      report("LoadedKernel::launch of that kernel", measure([&] { k.launch(p, call.problem, stream.get()); }, stream));
      const gen::LaunchShape l = gen::attention_launch(k.spec(), k.tiling(), call.problem, p.band_heads);
      CUfunction f = k.function().function();
      void* args[] = {&p};
      report("cuLaunchKernel of that kernel (function and shape taken before)", measure([&] {
               rt::check(rt::driver().cuLaunchKernel(f, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.smem_bytes,
                                                     stream.get(), args, nullptr),
                         "cuLaunchKernel");
             }, stream));
      rt::DeviceBuffer scratch(4096, kDevice);
      report("fill_bytes_async of 4 KiB", measure([&] {
               rt::fill_bytes_async(scratch.ptr(), 0, 4096, stream.get(), kDevice);
             }, stream));
    }
  }
  if (!o.out.empty()) {
    nlohmann::json result = {{"device", rt::query_device(kDevice).name}, {"shape", {{"b", o.b}, {"n", o.n}, {"h", o.h},
                             {"hkv", o.hkv}, {"d", o.d}}}, {"rows", rows}};
    cache::write_file_safely(o.out, result.dump(1) + "\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "qattn_bench_plan: %s\n", e.what());
  return 1;
}
