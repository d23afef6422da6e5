// qattn_bench_varlen: a ragged prefill batch (continuous batching) three ways, end to end from fp16/bf16
// (quantization passes included), on the same data in one run:
//   varlen     one attention() over the packed sequences (AttentionCall::cu_seqlens_q / kv);
//   separate   one attention() per sequence, back to back on the stream;
//   padded     one equal-length attention() at the longest lengths (every sequence padded to them: what a
//              batch without varlen costs; its output past each length is not meaningful).
//
//   qattn_bench_varlen [--spec S]... [--lengths 4096,1024,...] [--prefix 0] [--hkv 8] [--iters 20] [--out F]
//
// --lengths: each sequence's new tokens (q); --prefix P: each sequence's keys are P + q (a cached prefix,
// chunked prefill; causal masks align at the end). Kernels: each mode's default tiling (tuning off), so
// that no mode is tuned and another not. Each timed call follows an L2 flush (a 128 MiB memset) that also
// keeps the GPU busy while the host enqueues. Printed per spec and mode: median and min microseconds and
// the TOPS of the sequences' own attention work (4 · q · kv · d per head, halved on the causal square).
#include <algorithm>
#include <optional>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/safe_file.hpp"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/tuning/host_data.hpp"

namespace {

using namespace qattn;
constexpr int kDevice = 0;

struct Options {
  std::vector<std::string> specs;
  std::vector<int> lengths = {4096, 1024, 1024, 512, 256, 2048, 128, 3000};
  int prefix = 0, hkv = 8, iters = 20;
  std::string out;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw_bad_input(a + " needs a value");
      return argv[++i];
    };
    if (a == "--spec") o.specs.push_back(value());
    else if (a == "--lengths") {
      o.lengths.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.lengths.push_back(std::stoi(item));
    } else if (a == "--prefix") o.prefix = std::stoi(value());
    else if (a == "--hkv") o.hkv = std::stoi(value());
    else if (a == "--iters") o.iters = std::stoi(value());
    else if (a == "--out") o.out = value();
    else throw_bad_input("unknown option " + a + "; accepted: --spec, --lengths, --prefix, --hkv, --iters, --out");
  }
  if (o.specs.empty())
    o.specs = {"prefill qk=fp16 pv=fp16 out=fp16 d=128 causal gqa=4",
               "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k",
               "prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 causal gqa=4 smooth=k"};
  for (int n : o.lengths)
    if (n < 1) throw_bad_input("--lengths takes positive token counts");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The work of one sequence's attention (FlashAttention's count): causal keeps the keys at or before
// each row's diagonal, aligned at the end.
double flops(int q, int kv, int heads_q, int d, bool causal) {
  double pairs = static_cast<double>(q) * kv;
  if (causal) {
    pairs = 0;
    for (int i = 0; i < q; ++i) pairs += std::max(0, std::min(kv, kv - q + i + 1));
  }
  return 4.0 * pairs * heads_q * d;
}

struct Timing {
  double median_us, min_us;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), stream_(kDevice), flush_(128u << 20, kDevice) {
    RuntimeOptions ro;
    ro.use_cache = false;
    ro.tune = false;
    runtime_.emplace(ro);
  }

  // Times `enqueue` (one or more attention() calls on the stream) after a flush; 3 warm-up calls.
  template <class F>
  Timing time(F&& enqueue) {
    std::vector<double> us;
    for (int i = -3; i < o_.iters; ++i) {
      rt::Event start(kDevice), stop(kDevice);
      rt::fill_words_async(flush_.ptr(), static_cast<unsigned>(i), flush_.size() / 4, stream_.get(), kDevice);
      start.record(stream_.get());
      enqueue();
      stop.record(stream_.get());
      stop.synchronize();
      if (i >= 0) us.push_back(1000.0 * stop.elapsed_ms_since(start));
    }
    return {median(us), *std::min_element(us.begin(), us.end())};
  }

  nlohmann::json run_spec(const std::string& text) {
    Spec spec = runtime_->resolve(parse_spec(text));
    spec.varlen = false;
    const int d = spec.head_dim, hq = o_.hkv * spec.gqa, batch = static_cast<int>(o_.lengths.size());
    std::vector<int> cu_q{0}, cu_kv{0};
    int max_q = 0, max_kv = 0;
    double work = 0;
    for (int q : o_.lengths) {
      const int kv = q + o_.prefix;
      cu_q.push_back(cu_q.back() + q);
      cu_kv.push_back(cu_kv.back() + kv);
      max_q = std::max(max_q, q);
      max_kv = std::max(max_kv, kv);
      work += flops(q, kv, hq, d, spec.causal);
    }
    // Packed tensors big enough for the padded batch too (batch x max rows), filled once.
    const long long q_rows = static_cast<long long>(batch) * max_q, kv_rows = static_cast<long long>(batch) * max_kv;
    std::mt19937_64 rng(7);
    auto upload = [&](long long rows, int heads, int biased, int scaled) {
      const std::vector<float> x = rt::random_activations(rng, rows * heads, d, biased, scaled);
      std::vector<uint16_t> bits(x.size());
      for (size_t i = 0; i < x.size(); ++i) bits[i] = rt::to_bits(spec.out, x[i]);
      return rt::DeviceBuffer::from(bits, kDevice);
    };
    rt::DeviceBuffer dq = upload(q_rows, hq, 0, 4), dk = upload(kv_rows, o_.hkv, 4, 0), dv = upload(kv_rows, o_.hkv, 4, 0);
    rt::DeviceBuffer dout(static_cast<size_t>(q_rows) * hq * d * 2, kDevice);
    rt::DeviceBuffer dcu_q = rt::DeviceBuffer::from(cu_q, kDevice), dcu_kv = rt::DeviceBuffer::from(cu_kv, kDevice);

    AttentionCall varlen;
    varlen.spec = spec;
    varlen.problem = Problem{batch, hq, o_.hkv, max_q, max_kv};
    varlen.q = packed(dq.as<void>(), hq, d);
    varlen.k = packed(dk.as<void>(), o_.hkv, d);
    varlen.v = packed(dv.as<void>(), o_.hkv, d);
    varlen.o = packed(dout.as<void>(), hq, d);
    varlen.cu_seqlens_q = dcu_q.as<int>();
    varlen.cu_seqlens_kv = dcu_kv.as<int>();

    std::vector<AttentionCall> separate;
    for (int b = 0; b < batch; ++b) {
      AttentionCall c;
      c.spec = spec;
      c.problem = Problem{1, hq, o_.hkv, cu_q[b + 1] - cu_q[b], cu_kv[b + 1] - cu_kv[b]};
      const long long q0 = cu_q[b], k0 = cu_kv[b];
      c.q = packed(dq.as<char>() + q0 * hq * d * 2, hq, d);
      c.k = packed(dk.as<char>() + k0 * o_.hkv * d * 2, o_.hkv, d);
      c.v = packed(dv.as<char>() + k0 * o_.hkv * d * 2, o_.hkv, d);
      c.o = packed(dout.as<char>() + q0 * hq * d * 2, hq, d);
      separate.push_back(c);
    }

    AttentionCall padded;
    padded.spec = spec;
    padded.problem = Problem{batch, hq, o_.hkv, max_q, max_kv};
    padded.q = bshd(dq.as<void>(), max_q, hq, d);
    padded.k = bshd(dk.as<void>(), max_kv, o_.hkv, d);
    padded.v = bshd(dv.as<void>(), max_kv, o_.hkv, d);
    padded.o = bshd(dout.as<void>(), max_q, hq, d);

    CUstream s = stream_.get();
    const Timing t_var = time([&] { runtime_->attention(varlen, s); });
    const Timing t_sep = time([&] {
      for (const AttentionCall& c : separate) runtime_->attention(c, s);
    });
    const Timing t_pad = time([&] { runtime_->attention(padded, s); });
    const auto tops = [&](const Timing& t) { return work / (t.median_us * 1e-6) / 1e12; };
    std::printf("%-86s varlen %9.1f us %6.1f TOPS | separate %9.1f us %6.1f | padded %9.1f us %6.1f | varlen x%.2f vs separate, x%.2f vs padded\n",
                to_string(spec).c_str(), t_var.median_us, tops(t_var), t_sep.median_us, tops(t_sep), t_pad.median_us,
                tops(t_pad), t_sep.median_us / t_var.median_us, t_pad.median_us / t_var.median_us);
    Spec vspec = spec;
    vspec.varlen = true;
    return nlohmann::json{{"spec", to_string(spec)},
                          {"varlen_kernel", runtime_->kernel(vspec, varlen.problem).name()},
                          {"varlen_us", t_var.median_us}, {"varlen_min_us", t_var.min_us},
                          {"separate_us", t_sep.median_us}, {"separate_min_us", t_sep.min_us},
                          {"padded_us", t_pad.median_us}, {"padded_min_us", t_pad.min_us},
                          {"work_flops", work}, {"varlen_tops", tops(t_var)}, {"separate_tops", tops(t_sep)},
                          {"padded_tops", tops(t_pad)}};
  }

 private:
  Options o_;
  rt::Stream stream_;
  rt::DeviceBuffer flush_;
  std::optional<Runtime> runtime_;
};

int run(const Options& o) {
  std::string why;
  if (!rt::driver_available(&why)) throw Error(ErrorKind::no_gpu, "no CUDA driver: " + why);
  rt::ContextGuard context(kDevice);
  Bench bench(o);
  std::string lengths;
  for (int n : o.lengths) lengths += (lengths.empty() ? "" : ",") + std::to_string(n);
  std::printf("qattn_bench_varlen: lengths %s, prefix %d, hkv %d, %d iters, default tilings\n", lengths.c_str(), o.prefix,
              o.hkv, o.iters);
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& s : o.specs) rows.push_back(bench.run_spec(s));
  if (!o.out.empty()) {
    const nlohmann::json doc{{"lengths", o.lengths}, {"prefix", o.prefix}, {"hkv", o.hkv}, {"iters", o.iters},
                             {"rows", rows}};
    cache::write_file_safely(o.out, doc.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const qattn::Error& e) {
    std::fprintf(stderr, "qattn_bench_varlen: %s\n", e.what());
    return e.kind() == qattn::ErrorKind::bad_input ? 2 : e.kind() == qattn::ErrorKind::no_gpu ? 3 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_bench_varlen: %s\n", e.what());
    return 1;
  }
}
