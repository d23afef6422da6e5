#include "runtime/tuning/gpu_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "qattn/error.hpp"
#include "qattn/kernel_name.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/tuning/host_data.hpp"

namespace qattn::rt {

AttentionCall DeviceInputs::call(const Spec& spec, const Problem& p) const {
  AttentionCall c;
  c.spec = spec;
  c.problem = p;
  c.q = tq;
  c.k = tk;
  c.v = tv;
  c.o = to;
  return c;
}

namespace {

std::vector<uint16_t> to_layout(const std::vector<float>& x, Fmt fmt, int b, int h, int s, int d, bool bhsd) {
  std::vector<uint16_t> out(x.size());
  for (int ib = 0; ib < b; ++ib)
    for (int ih = 0; ih < h; ++ih)
      for (int is = 0; is < s; ++is)
        for (int c = 0; c < d; ++c) {
          const size_t src = ((static_cast<size_t>(ib) * h + ih) * s + is) * d + c;
          const size_t dst = bhsd ? src : ((static_cast<size_t>(ib) * s + is) * h + ih) * d + c;
          out[dst] = to_bits(fmt, x[src]);
        }
  return out;
}

}  // namespace

DeviceInputs make_check_inputs(const Spec& spec, const Problem& p, unsigned long long seed, bool bhsd_layout, int ordinal,
                               CheckData data) {
  std::mt19937_64 rng(seed);
  const int d = spec.head_dim;
  DeviceInputs in;
  in.q = random_activations(rng, 1LL * p.batch * p.heads_q * p.q_len, d, 0, data == CheckData::outliers ? 4 : 0);
  in.k = random_activations(rng, 1LL * p.batch * p.heads_kv * p.kv_len, d, 6, 0);
  in.v = random_activations(rng, 1LL * p.batch * p.heads_kv * p.kv_len, d, 0, 0);
  for (auto* x : {&in.q, &in.k, &in.v})
    for (float& f : *x) f = from_bits(spec.out, to_bits(spec.out, f));   // what the kernel really sees
  in.dq = DeviceBuffer::from(to_layout(in.q, spec.out, p.batch, p.heads_q, p.q_len, d, bhsd_layout), ordinal);
  in.dk = DeviceBuffer::from(to_layout(in.k, spec.out, p.batch, p.heads_kv, p.kv_len, d, bhsd_layout), ordinal);
  in.dv = DeviceBuffer::from(to_layout(in.v, spec.out, p.batch, p.heads_kv, p.kv_len, d, bhsd_layout), ordinal);
  in.dout = DeviceBuffer(2ull * p.batch * p.heads_q * p.q_len * d, ordinal);
  in.dout.fill(0xff);   // poison: NaN in fp16 and bf16, so an unwritten element fails the check
  auto view = [&](DeviceBuffer& b, int seq, int heads) {
    return bhsd_layout ? bhsd(b.as<void>(), seq, heads, d) : bshd(b.as<void>(), seq, heads, d);
  };
  in.tq = view(in.dq, p.q_len, p.heads_q);
  in.tk = view(in.dk, p.kv_len, p.heads_kv);
  in.tv = view(in.dv, p.kv_len, p.heads_kv);
  in.to = view(in.dout, p.q_len, p.heads_q);
  return in;
}

namespace {

// Download an output written in the same layout as make_inputs, back to [b, h, s, d] floats.
std::vector<float> download_output(const DeviceInputs& in, Fmt fmt, const Problem& p, int d, bool bhsd) {
  const std::vector<uint16_t> raw = in.dout.to_vector<uint16_t>();
  std::vector<float> out(raw.size());
  for (int ib = 0; ib < p.batch; ++ib)
    for (int ih = 0; ih < p.heads_q; ++ih)
      for (int is = 0; is < p.q_len; ++is)
        for (int c = 0; c < d; ++c) {
          const size_t dst = ((static_cast<size_t>(ib) * p.heads_q + ih) * p.q_len + is) * d + c;
          const size_t src = bhsd ? dst : ((static_cast<size_t>(ib) * p.q_len + is) * p.heads_q + ih) * d + c;
          out[dst] = from_bits(fmt, raw[src]);
        }
  return out;
}

}  // namespace

std::string CheckResult::summary() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "cos=%.6f relL2=%.3e maxabs=%.3e nonfinite=%lld", cosine, rel_l2, max_abs, non_finite);
  std::string s = buf;
  if (std::isfinite(format_cosine)) {
    std::snprintf(buf, sizeof buf, " format-alone cos=%.6f relL2=%.3e", format_cosine, format_rel_l2);
    s += buf;
  }
  return s + (verdict.empty() ? "" : " (" + verdict + ")");
}

CheckResult check_against_reference(Runtime::Impl& runtime, const Spec& spec_in, const Tiling& tiling, const Problem& p,
                                    unsigned long long seed, bool bhsd_layout, CheckData data) {
  const Spec spec = runtime.resolve(spec_in);
  const int ordinal = runtime.options.device;
  DeviceInputs in = make_check_inputs(spec, p, seed, bhsd_layout, ordinal, data);
  const AttentionCall call = in.call(spec, p);
  Stream stream(ordinal);
  auto prepared = runtime.prepare_with(call, tiling, stream.get());
  runtime.run(*prepared, call.o, 0.f, nullptr, stream.get());
  stream.synchronize();
  return evaluate_check(spec, tiling, p, in, bhsd_layout);
}

CheckResult evaluate_check(const Spec& spec, const Tiling& tiling, const Problem& p, const DeviceInputs& in, bool bhsd_layout) {
  const std::vector<float> all = download_output(in, spec.out, p, spec.head_dim, bhsd_layout);
  const int d = spec.head_dim;
  const reference::Dims dims{p.batch, p.heads_q, p.heads_kv, p.q_len, p.kv_len, d, d};
  const std::vector<reference::RowId> rows = reference::sample_rows(dims, 4, 256);
  std::vector<float> got;
  for (const reference::RowId& r : rows) {
    const size_t at = ((static_cast<size_t>(r.b) * p.heads_q + r.h) * p.q_len + r.i) * d;
    got.insert(got.end(), all.begin() + static_cast<long>(at), all.begin() + static_cast<long>(at + d));
  }
  long long unwritten = 0;   // every element, not only the sampled rows, must have been written
  for (float x : all) unwritten += !std::isfinite(x);
  const reference::Options options{spec.causal, 1.0 / std::sqrt(static_cast<double>(d))};
  const std::vector<double> want = reference::attention_rows(
      reference::Operand::of(in.q.data(), reference::bhsd_strides(p.heads_q, p.q_len, d)),
      reference::Operand::of(in.k.data(), reference::bhsd_strides(p.heads_kv, p.kv_len, d)),
      reference::Operand::of(in.v.data(), reference::bhsd_strides(p.heads_kv, p.kv_len, d)), dims, options, rows);
  reference::ErrorMetrics m = reference::compare(want, got);
  m.nonfinite = std::max(m.nonfinite, unwritten);
  CheckResult r;
  r.cosine = m.cosine;
  r.rel_l2 = m.rel_l2;
  r.max_abs = m.max_abs;
  r.non_finite = m.nonfinite;
  reference::ErrorMetrics format;
  const bool simulated = spec.quantized() && m.cosine < min_cosine(spec);   // only rule (b) needs it
  if (simulated) {
    format = reference::compare(want, simulate_format_rows(spec, tiling, in.q, in.k, in.v, dims, rows));
    r.format_cosine = format.cosine;
    r.format_rel_l2 = format.rel_l2;
  }
  const GateVerdict v = accuracy_gate(spec, m, simulated ? &format : nullptr);
  r.passed = v.passed;
  r.verdict = v.reason;
  return r;
}

std::vector<std::string> GpuCandidateRunner::compile(const Spec& spec, const std::vector<Tiling>& tilings) {
  // Each candidate as tuned (its binary is the tuned row's) and, where they differ, as attention()
  // launches it (its fused-Q / TMA twin): the one verified and timed below.
  std::vector<gen::Source> sources;
  std::vector<size_t> launched_at(tilings.size());
  for (const Tiling& t : tilings) sources.push_back(gen::render_kernel(spec, t));
  for (size_t i = 0; i < tilings.size(); ++i) {
    const Tiling form = rt_.launch_form(spec, tilings[i]);
    launched_at[i] = i;
    if (form != tilings[i]) {
      launched_at[i] = sources.size();
      sources.push_back(gen::render_kernel(spec, form));
    }
  }
  const std::vector<Binary> bins = rt_.binaries->get(sources);
  std::vector<std::string> errors;
  for (size_t i = 0; i < tilings.size(); ++i) {
    errors.push_back(!bins[i].error.empty() ? bins[i].error : bins[launched_at[i]].error);
    keys_[to_string(tilings[i])] = bins[i].key;
  }
  return errors;
}

std::string GpuCandidateRunner::binary_key(const Tiling& t) const {
  const auto it = keys_.find(to_string(t));
  return it == keys_.end() ? std::string() : it->second;
}

Verification GpuCandidateRunner::verify(const Spec& spec, const Tiling& tuned) {
  const Tiling tiling = rt_.launch_form(spec, tuned);
  // Ragged sizes that cross tile edges, GQA, and q_len != kv_len for the causal alignment.
  Problem p;
  p.batch = 1;
  p.heads_kv = 2;
  p.heads_q = 2 * spec.gqa;
  p.q_len = 77;
  p.kv_len = 203;
  // Both kinds of data: a lossy format may pass on the outlier data by rule (b) of the gate only, so the
  // plain data, where the format holds its floor or stays close to it, is what catches a kernel that is
  // wrong by less than the format loses (a skipped tail tile, a mis-scaled group).
  std::random_device rd;
  bool passed = true;
  std::string detail = tiling == tuned ? "" : "launched as " + kernel_name(spec, tiling) + "; ";
  for (CheckData data : {CheckData::outliers, CheckData::plain}) {
    const CheckResult r =
        check_against_reference(rt_, spec, tiling, p, (static_cast<unsigned long long>(rd()) << 32) ^ rd(), false, data);
    passed = passed && r.passed;
    detail += std::string(data == CheckData::outliers ? "outlier data: " : "; plain data: ") + r.summary();
  }
  return {passed, detail};
}

std::vector<double> GpuCandidateRunner::time(const Spec& spec, const Tiling& tuned, const Problem& problem,
                                             const TimingOptions& options) {
  const Tiling tiling = rt_.launch_form(spec, tuned);
  const int ordinal = rt_.options.device;
  const std::string key = std::string(to_string(spec.out)) + "|" + std::to_string(spec.head_dim) + "|" + to_string(problem);
  std::vector<DeviceInputs>& sets = inputs_[key];
  if (sets.empty()) {
    // Enough distinct input sets that together they overflow L2 twice, so no run finds its inputs cached.
    const double set_bytes = 2.0 * spec.head_dim *
                             (2.0 * problem.batch * problem.heads_q * problem.q_len +
                              2.0 * problem.batch * problem.heads_kv * problem.kv_len);
    const double l2 = rt_.device().l2_bytes > 0 ? rt_.device().l2_bytes : 50e6;
    const int n = std::max(1, std::min(options.rotate_buffers, static_cast<int>(std::ceil(2 * l2 / set_bytes))));
    std::random_device rd;
    for (int i = 0; i < n; ++i) sets.push_back(make_check_inputs(spec, problem, (static_cast<unsigned long long>(rd()) << 32) ^ rd(), false, ordinal));
  }
  Stream stream(ordinal);
  std::vector<std::unique_ptr<PreparedAttention>> prepared;
  for (DeviceInputs& in : sets) prepared.push_back(rt_.prepare_with(in.call(spec, problem), tiling, stream.get()));
  const size_t n = sets.size();
  for (int i = 0; i < options.warmup; ++i)
    rt_.run(*prepared[i % n], sets[i % n].to, 0.f, nullptr, stream.get());
  Event start(ordinal), stop(ordinal);
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) {
    const size_t s = static_cast<size_t>(i) % n;
    start.record(stream.get());
    rt_.run(*prepared[s], sets[s].to, 0.f, nullptr, stream.get());
    stop.record(stream.get());
    stop.synchronize();
    samples.push_back(1000.0 * stop.elapsed_ms_since(start));
  }
  return samples;
}

}  // namespace qattn::rt

namespace qattn::rt {
GpuCandidateRunner::GpuCandidateRunner(Runtime::Impl& runtime) : rt_(runtime) {}
GpuCandidateRunner::~GpuCandidateRunner() = default;
}  // namespace qattn::rt

namespace qattn {

namespace {
void refuse_varlen(const Spec& spec, const char* what) {
  if (spec.varlen)
    throw_bad_input(std::string(what) + " runs equal-length data; drop varlen from '" + to_string(spec) +
                    "' (a varlen kernel runs the tiling of that equal-length spec)");
}
}  // namespace

std::vector<double> Runtime::benchmark(const Spec& spec_in, const Problem& problem, const TimingOptions& timing) {
  refuse_varlen(spec_in, "benchmark()");
  const Spec spec = resolve(spec_in);
  const Kernel& k = kernel(spec, problem);
  rt::GpuCandidateRunner runner(*impl_);
  return runner.time(spec, k.tiling(), problem, timing);   // times k's launch form
}

Runtime::Accuracy Runtime::check(const Spec& spec, const Problem& problem, unsigned long long seed, bool bhsd_layout) {
  // The call attention() makes: the tuned kernel's tiling in its launch form.
  refuse_varlen(spec, "check()");
  const Spec resolved = resolve(spec);
  Impl::require_prefill(resolved, problem);
  const Tiling tiling = launch_form(resolved, kernel(resolved, problem).tiling());
  const rt::CheckResult r = rt::check_against_reference(*impl_, resolved, tiling, problem, seed, bhsd_layout);
  Accuracy a;
  a.passed = r.passed;
  a.cosine = r.cosine;
  a.rel_l2 = r.rel_l2;
  a.max_abs = r.max_abs;
  a.non_finite = r.non_finite;
  a.format_cosine = r.format_cosine;
  a.format_rel_l2 = r.format_rel_l2;
  a.verdict = r.verdict;
  return a;
}

}  // namespace qattn
