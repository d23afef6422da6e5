// qattn_bench_quant: the quantization passes of one operand, timed on the GPU in the plan forms that
// smoothing and per_channel scales have: the statistics pass + finalize + quantizer (reads the input
// twice), one pass (head_sync.cuh: reads it once, blocks of a head wait for one another), and for K
// smoothing with token-local scales the statistics of a sample of --sample tokens per head + finalize +
// quantizer (reads the input once plus the sample; RuntimeOptions::k_mean_sample_tokens, default 1024;
// only where n > sample). Issue 3's quantization-overhead target is what this measures;
// bench_prefill.py's `quant` column is the sum.
//
//   qattn_bench_quant [--b 4] [--h 16] [--n 4096] [--d 128] [--sample 1024] [--iters 20] [--out result.json]
//
// Each timed call runs every launch of the plan (scratch memsets included) between two CUDA events,
// after an L2 flush (a 128 MiB memset) that also keeps the GPU busy while the host enqueues, so host
// overhead stays out of the events. Inputs: fp16 activations with channel bias (K-like), never zeros.
// Printed per operand and form: median and min microseconds, and the DRAM rate that one read of the
// input plus the codes written would need at that time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/safe_file.hpp"
#include "qattn/error.hpp"
#include "generator/quant_plan.hpp"
#include "runtime/calls/helper_kernels.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/module.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "runtime/tuning/host_data.hpp"

namespace {

using namespace qattn;
constexpr int kDevice = 0;

struct Options {
  int b = 4, h = 16, n = 4096, d = 128, iters = 20;
  int sample = 1024;   // K's smoothing-mean sample (the RuntimeOptions default)
  std::string out;
};

struct Operand {
  const char* name;
  gen::QuantRequest request;
};

// The operands of bench_prefill.py's int8 variants (smooth=kv; per_token / per_warp Q and K).
std::vector<Operand> operands(int d) {
  std::vector<Operand> v;
  v.push_back({"Q rows per_token", {Fmt::fp16, Gran::per_token, 0, false, false, d}});
  v.push_back({"K rows per_token smooth", {Fmt::fp16, Gran::per_token, 0, true, false, d}});
  v.push_back({"K rows per_warp smooth", {Fmt::fp16, Gran::per_warp, 64, true, false, d}});
  // rotate=hadamard: the same rows through the rotation (its shuffles and adds are the only change).
  gen::QuantRequest q_rot{Fmt::fp16, Gran::per_warp, 32, false, false, d}, k_rot{Fmt::fp16, Gran::per_warp, 64, true, false, d};
  q_rot.rotate = quant::kRotateQ, k_rot.rotate = quant::kRotateK;
  v.push_back({"Q rows per_warp", {Fmt::fp16, Gran::per_warp, 32, false, false, d}});
  v.push_back({"Q rows per_warp rotated", q_rot});
  v.push_back({"K rows per_warp smooth rotated", k_rot});
  v.push_back({"V^T int8 per_channel smooth", {Fmt::fp16, Gran::per_channel, 0, true, true, d}});
  gen::QuantRequest fp8{Fmt::fp16, Gran::per_channel, 0, true, true, d};
  fp8.code = Fmt::fp8e4m3;
  v.push_back({"V^T fp8 per_channel smooth", fp8});
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw_bad_input(a + " needs a value");
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end || x < 1 || x > (1 << 22)) throw_bad_input(a + " takes a positive integer, got '" + v + "'");
      return static_cast<int>(x);
    };
    if (a == "--b") o.b = number();
    else if (a == "--h") o.h = number();
    else if (a == "--n") o.n = number();
    else if (a == "--d") o.d = number();
    else if (a == "--iters") o.iters = number();
    else if (a == "--sample") o.sample = number();
    else if (a == "--out") o.out = value();
    else throw_bad_input("unknown option " + a + "; accepted: --b --h --n --d --sample --iters --out");
  }
  if (!quant::supported_head_dim(o.d)) throw_bad_input("--d must be 64, 96, 128 or 256");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), stream_(kDevice), flush_(128u << 20, kDevice) {
    const rt::DeviceInfo dev = rt::query_device(kDevice);
    arch_ = rt::arch_for(dev);
    resident_ = quant::kOnePassMinBlocks * dev.sm_count;
    std::mt19937_64 rng(20261123);
    const long long rows = 1LL * o.b * o.h * o.n;
    const std::vector<float> x = rt::random_activations(rng, rows, o.d, 8, 4);
    std::vector<uint16_t> bits(x.size());
    std::transform(x.begin(), x.end(), bits.begin(), [](float f) { return rt::to_bits(Fmt::fp16, f); });
    x_ = rt::DeviceBuffer::from(bits);
  }

  // Median and min microseconds of the plan for `op` with the given resident-block count and K mean
  // sample (QuantProblem::mean_sample_tokens).
  std::pair<double, double> time(const Operand& op, int resident, int sample, std::string* form) {
    const int pad = op.request.transpose ? (o_.n + kVPadTokens - 1) / kVPadTokens * kVPadTokens : o_.n;
    const gen::QuantProblem p{o_.b, o_.h, o_.n, pad, resident, sample};
    const gen::QuantPlan plan = gen::plan_quant(op.request, p);
    *form = gen::quant_one_pass(op.request, p)     ? "one pass"
            : gen::quant_samples_mean(op.request, p) ? "sampled stats"
            : plan.launches.size() > 1                 ? "stats pass"
                                                       : "single";
    const long long rows = 1LL * o_.b * o_.h * pad;
    rt::DeviceBuffer y(static_cast<size_t>(rows * o_.d), kDevice), scale(sizeof(float) * (plan.scale_floats + 1), kDevice),
        mean(sizeof(float) * (plan.mean_floats + 4), kDevice), scratch(sizeof(float) * (plan.scratch_floats + 4), kDevice);
    QuantParams qp{};
    qp.x = TensorRef{x_.as<void>(), 1LL * o_.h * o_.n * o_.d, 1LL * o_.n * o_.d, o_.d, 1};
    qp.y = op.request.transpose ? TensorRef{y.as<void>(), 1LL * o_.h * o_.d * pad, 1LL * o_.d * pad, 1, pad}
                                : TensorRef{y.as<void>(), 1LL * o_.h * pad * o_.d, 1LL * pad * o_.d, o_.d, 1};
    qp.scale = gen::dense_scale_ref(op.request, p, scale.as<float>());
    qp.mean = mean.as<float>();
    qp.amax_scratch = scratch.as<float>();
    qp.batch = o_.b, qp.heads = o_.h, qp.seq_len = o_.n, qp.seq_pad = pad, qp.d = o_.d;
    qp.qmax = op.request.code == Fmt::fp8e4m3 ? 448.f : 127.f;
    const std::string err = gen::quant_params_error(op.request, qp);
    if (!err.empty()) throw_bad_input(err);
    std::vector<const rt::Kernel*> kernels;
    for (const gen::QuantLaunch& l : plan.launches) kernels.push_back(&kernel(qattn::gen::render_quant_pass(op.request, l, parse_arch(arch_))));

    std::vector<double> us;
    for (int i = -3; i < o_.iters; ++i) {   // 3 warm-up calls
      rt::Event start(kDevice), stop(kDevice);
      rt::fill_words_async(flush_.ptr(), static_cast<unsigned>(i), flush_.size() / 4, stream_.get(), kDevice);
      start.record(stream_.get());
      for (size_t k = 0; k < plan.launches.size(); ++k) {
        const gen::QuantLaunch& l = plan.launches[k];
        if (l.zero_scratch_floats > 0)
          rt::fill_bytes_async(scratch.ptr(), 0, sizeof(float) * l.zero_scratch_floats, stream_.get(), kDevice);
        kernels[k]->launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, 0, stream_.get(), qp);
      }
      stop.record(stream_.get());
      stop.synchronize();
      if (i >= 0) us.push_back(1000.0 * stop.elapsed_ms_since(start));
    }
    return {median(us), *std::min_element(us.begin(), us.end())};
  }

  const std::string& arch() const { return arch_; }
  int resident() const { return resident_; }

 private:
  const rt::Kernel& kernel(const gen::Source& src) {
    auto it = kernels_.find(src.kernel_name);
    if (it != kernels_.end()) return it->second.second;
    rt::CompileRequest req;
    req.source = src.text;
    req.program_name = src.kernel_name + ".cu";
    req.arch = arch_;
    const rt::CompileResult r = rt::compile(req);
    if (!r.ok) throw Error(ErrorKind::failure, "compiling " + src.kernel_name + ": " + r.log);
    rt::Module m = rt::Module::load(r.cubin, kDevice);
    rt::Kernel k = m.kernel(src.kernel_name);
    return kernels_.emplace(src.kernel_name, std::make_pair(std::move(m), std::move(k))).first->second.second;
  }

  Options o_;
  rt::Stream stream_;
  rt::DeviceBuffer flush_, x_;
  std::string arch_;
  int resident_ = 0;
  std::map<std::string, std::pair<rt::Module, rt::Kernel>> kernels_;
};

int run(const Options& o) {
  std::string why;
  if (!rt::driver_available(&why)) throw Error(ErrorKind::no_gpu, "no CUDA driver: " + why);
  rt::ContextGuard context(kDevice);
  Bench bench(o);
  const double bytes_in = 2.0 * o.b * o.h * o.n * o.d, bytes_out = 1.0 * o.b * o.h * o.n * o.d;
  std::printf("qattn_bench_quant: b=%d h=%d n=%d d=%d, fp16 input %.1f MiB, %s, resident blocks %d, K mean sample %d, %d iters\n",
              o.b, o.h, o.n, o.d, bytes_in / (1 << 20), bench.arch().c_str(), bench.resident(), o.sample, o.iters);
  std::printf("%-30s %-13s %10s %10s %12s\n", "operand", "form", "median us", "min us", "1-read GB/s");
  nlohmann::json rows = nlohmann::json::array();
  // The forms in turn: statistics pass (or single), one pass, K's sampled statistics pass.
  const std::pair<int, int> forms[] = {{0, 0}, {bench.resident(), 0}, {0, o.sample}};
  for (const Operand& op : operands(o.d))
    for (const auto& [resident, sample] : forms) {
      std::string form;
      const auto [med, lo] = bench.time(op, resident, sample, &form);
      if (resident && form != "one pass") continue;      // the same plan as the first row
      if (sample && form != "sampled stats") continue;   // no sample for this operand or length
      const double gbs = (bytes_in + bytes_out) / (med * 1e3);
      std::printf("%-30s %-13s %10.1f %10.1f %12.0f\n", op.name, form.c_str(), med, lo, gbs);
      rows.push_back({{"operand", op.name}, {"form", form}, {"median_us", med}, {"min_us", lo}, {"one_read_gbs", gbs}});
    }
  if (!o.out.empty()) {
    nlohmann::json j{{"b", o.b}, {"h", o.h}, {"n", o.n}, {"d", o.d}, {"arch", bench.arch()}, {"resident_blocks", bench.resident()},
                     {"k_mean_sample", o.sample}, {"rows", rows}};
    try {
      cache::write_file_safely(o.out, j.dump(1));   // whole or not at all, never through a link
    } catch (const cache::BadPath& e) {
      throw Error(ErrorKind::bad_input, e.what());
    } catch (const std::exception& e) {
      throw Error(ErrorKind::failure, "cannot write " + o.out + ": " + e.what());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn_bench_quant: %s\n", e.what());
    return e.kind() == qattn::ErrorKind::bad_input ? 2 : e.kind() == qattn::ErrorKind::no_gpu ? 3 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_bench_quant: %s\n", e.what());
    return 1;
  }
}
