// Runtime::tune_linear: the linear sweep (tuner/linear_sweep.cpp) timed on this GPU, stored as the
// cache's linear_dataflow decision and installed for this runtime's flow=auto calls at once; and
// Runtime::Impl::linear_dispatch, which reads a stored table once per family (no timing, ever, there).
#include <algorithm>
#include <cmath>
#include <random>

#include "generator/render.hpp"
#include "generator/search_space.hpp"
#include "qattn/error.hpp"
#include "runtime/device/device.hpp"
#include "runtime/jit/toolchain.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/tuning/host_data.hpp"

namespace qattn {
namespace {

// Random weights and activations of one layer (never zeros), with enough weight copies that the
// weights, cycled, never sit in L2 (a real model's layers do not), and CUDA-event timings of linear().
class GpuLinearTimer final : public LinearTimer {
 public:
  GpuLinearTimer(Runtime& runtime, Runtime::Impl& impl, const Spec& family, TimingOptions timing)
      : rt_(runtime), impl_(impl), family_(family), timing_(timing), stream_(impl.options.device) {
    const int dev = impl.options.device;
    const Fmt w = family.weight.fmt;
    const long long row = w == Fmt::int4 ? family.k / 2 : w == Fmt::int8 ? family.k : 2LL * family.k;
    const size_t w_bytes = static_cast<size_t>(row) * family.n;
    const size_t l2 = static_cast<size_t>(std::max(1, impl.device().l2_bytes));
    copies_ = static_cast<int>(std::clamp<size_t>(2 * l2 / std::max<size_t>(w_bytes, 1) + 1, 1, 16));
    std::mt19937_64 rng(0x51ed2701ULL);
    std::vector<unsigned char> bytes(w_bytes);
    if (w == Fmt::int8 || w == Fmt::int4) {
      for (auto& b : bytes) b = static_cast<unsigned char>(rng() & (w == Fmt::int8 ? 0x7f : 0xff));
    } else {
      std::normal_distribution<float> g(0.0f, 0.02f);
      for (size_t i = 0; i + 1 < w_bytes; i += 2) {
        const uint16_t h = rt::to_bits(w, g(rng));
        bytes[i] = static_cast<unsigned char>(h & 0xff), bytes[i + 1] = static_cast<unsigned char>(h >> 8);
      }
    }
    for (int i = 0; i < copies_; ++i) weights_.push_back(rt::DeviceBuffer::from(bytes, dev));
    const int groups = w == Fmt::int4 ? family.k / kLinearInt4Group : 1;
    std::vector<float> scale(static_cast<size_t>(family.n) * groups), zero(scale.size());
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.001f + 0.001f * static_cast<float>(rng() % 100), zero[i] = 8;
    scale_ = rt::DeviceBuffer::from(scale, dev);
    zero_ = rt::DeviceBuffer::from(zero, dev);
    std::vector<uint16_t> bias(family.n);
    for (auto& b : bias) b = rt::to_bits(family.out, 0.01f * static_cast<float>(rng() % 100));
    bias_ = rt::DeviceBuffer::from(bias, dev);
    rt::synchronize_device(dev);   // the uploads ran on the legacy stream; stream_ does not wait for it
  }

  double time_us(const Spec& spec, const Tiling& tiling, int m, int splits) override {
    const int dev = impl_.options.device;
    if (static_cast<long long>(m) * family_.k * 2 > static_cast<long long>(a_.size())) {
      std::mt19937_64 rng(0x2545f491ULL + m);
      const std::vector<float> af = rt::random_activations(rng, m, family_.k, 0, 4);
      std::vector<uint16_t> bits(af.size());
      for (size_t i = 0; i < af.size(); ++i) bits[i] = rt::to_bits(family_.act, af[i]);
      a_ = rt::DeviceBuffer::from(bits, dev);
      c_ = rt::DeviceBuffer(static_cast<size_t>(m) * family_.n * 2, dev);
      rt::synchronize_device(dev);
    }
    LinearCall call;
    call.spec = spec;
    call.a = a_.as<void>();
    call.c = c_.as<void>();
    call.m = m;
    call.tiling = tiling;
    call.splits = splits;
    call.weights.scale = spec.weight.fmt == Fmt::int8 || spec.weight.fmt == Fmt::int4 ? scale_.as<float>() : nullptr;
    call.weights.zero = spec.weight.fmt == Fmt::int4 ? zero_.as<float>() : nullptr;
    call.weights.bias = spec.bias ? bias_.as<void>() : nullptr;
    const auto on_copy = [&](int i) { call.weights.w = weights_[static_cast<size_t>(i % copies_)].as<void>(); };
    // Enqueued back to back, each call between its own two events, behind the warm-up calls: while the
    // GPU works through the queue the host's issue time stays out of the events (a call timed alone on an
    // idle GPU would count it, a few µs against kernels of 5-50 µs, and more for the paths that do more
    // host work per call).
    on_copy(0);
    rt_.linear(call, stream_.get());   // the first call may grow the stream's workspace: not in the queue
    stream_.synchronize();
    for (int i = 0; i < timing_.warmup; ++i) on_copy(i), rt_.linear(call, stream_.get());
    std::vector<rt::Event> starts, stops;
    for (int i = 0; i < timing_.repeats; ++i) starts.emplace_back(dev), stops.emplace_back(dev);
    for (int i = 0; i < timing_.repeats; ++i) {
      on_copy(i);
      starts[static_cast<size_t>(i)].record(stream_.get());
      rt_.linear(call, stream_.get());
      stops[static_cast<size_t>(i)].record(stream_.get());
    }
    stream_.synchronize();
    std::vector<double> samples;
    for (int i = 0; i < timing_.repeats; ++i)
      samples.push_back(1000.0 * stops[static_cast<size_t>(i)].elapsed_ms_since(starts[static_cast<size_t>(i)]));
    return median(samples);
  }

 private:
  Runtime& rt_;
  Runtime::Impl& impl_;
  Spec family_;
  TimingOptions timing_;
  rt::Stream stream_;
  int copies_ = 1;
  std::vector<rt::DeviceBuffer> weights_;
  rt::DeviceBuffer scale_, zero_, bias_, a_, c_;
};

}  // namespace

LinearTable Runtime::tune_linear(const Spec& spec_in, const LinearSweepOptions& options_in) {
  if (spec_in.phase != Phase::linear) throw_bad_input("tune_linear takes a linear spec; got '" + to_string(spec_in) + "'");
  Spec spec = resolve(spec_in);
  spec.flow = Dataflow::automatic;
  LinearSweepOptions options = options_in;
  if (options.limits.max_smem_per_block <= 0) options.limits = impl_->limits();
  options.sm_count = impl_->device().sm_count;
  // Every kernel the sweep launches compiled up front, in parallel; the binary cache then serves each load.
  std::vector<gen::Source> sources;
  for (Dataflow flow : kLinearPaths) {
    Spec with_flow = spec;
    with_flow.flow = flow;
    std::vector<Tiling> seen;
    for (int m : options.rows) {
      if (m < 1 || m > kMaxLinearTunedRows) continue;
      for (const Tiling& t : gen::linear_sweep_tilings(with_flow, m, options.limits, options.tilings_per_point))
        if (std::find(seen.begin(), seen.end(), t) == seen.end()) seen.push_back(t), sources.push_back(gen::render_kernel(with_flow, t));
    }
  }
  for (const rt::Binary& b : impl_->binaries->get(sources))
    if (!b.error.empty()) throw Error(ErrorKind::failure, "tune_linear: " + b.kernel_name + " does not compile: " + b.error);
  GpuLinearTimer timer(*this, *impl_, spec, impl_->options.timing);
  const LinearTable table = sweep_linear(spec, options, timer);
  auto dispatch = std::make_shared<const LinearDispatch>(table);
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (impl_->store && !impl_->options.read_only) {
    cache::DecisionRecord rec;
    rec.kind = kLinearDataflowKind;
    rec.key = table.family;
    rec.device = impl_->device_key();
    rec.toolchain = rt::toolchain_fingerprint();
    rec.json = dump_decision(table);
    impl_->store->put_decision(rec);
  }
  impl_->linear_dispatches[Impl::spec_fields(spec)] = dispatch;
  impl_->linear_launches.clear();   // eager calls route again, by the new table
  return table;
}

bool Runtime::linear_tuned(const Spec& spec_in) {
  const Spec spec = resolve(spec_in);
  if (!impl_->store) return false;
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  return impl_->store->get_decision(kLinearDataflowKind, linear_family_key(spec), impl_->device_key(), rt::toolchain_fingerprint())
      .has_value();
}

std::shared_ptr<const LinearDispatch> Runtime::Impl::linear_dispatch(const Spec& resolved) {
  Spec family = resolved;
  family.flow = Dataflow::automatic;
  const SpecFields key = spec_fields(family);
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (auto it = linear_dispatches.find(key); it != linear_dispatches.end()) return it->second;
  std::shared_ptr<const LinearDispatch> table;
  if (store) {
    const std::string text = linear_family_key(family);
    try {
      if (auto rec = store->get_decision(kLinearDataflowKind, text, device_key(), rt::toolchain_fingerprint()))
        table = std::make_shared<const LinearDispatch>(parse_linear_table(rec->json));
    } catch (const Error& e) {
      table.reset();
      dispatch_warnings.push_back("ignoring the stored linear decision of '" + text + "': " + e.what());
    }
  }
  linear_dispatches[key] = table;
  return table;
}

}  // namespace qattn
