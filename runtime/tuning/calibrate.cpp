// calibrate(): the GPU side of adaptive quantization. Every format runs through the same public
// Runtime::attention the application will use, on the caller's sample tensors, into an output buffer of
// its own; the outputs come back to the host and the choice itself (tuner/quant_calibration.cpp) sees
// only metrics. Nothing here decides anything.
#include <cmath>
#include <memory>

#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "qattn/runtime.hpp"
#include "qattn/validate.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/tuning/host_data.hpp"
#include "runtime/tuning/quant_decision_store.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn {
namespace {

class DeviceFormatEvaluator final : public FormatEvaluator {
 public:
  DeviceFormatEvaluator(Runtime& runtime, const AttentionCall& sample) : runtime_(runtime), sample_(sample) {}

  void prepare_reference(const Spec& reference) override {
    reference_out_ = run(reference);
    for (double x : reference_out_)
      if (!std::isfinite(x))
        throw Error(ErrorKind::failure, "the " + std::string(to_string(reference.out)) +
                                            " reference kernel wrote non-finite outputs on the sample data "
                                            "(inf/NaN inputs, or values beyond the element type's range?)");
  }

  FormatMetrics evaluate(const Spec& candidate, const Spec&) override {
    return compare_outputs(reference_out_, run(candidate));
  }

 private:
  // One attention call of `spec` on the sample inputs; the output as float64, [b, h, s, d].
  std::vector<double> run(const Spec& spec) {
    const Problem& p = sample_.problem;
    const int ordinal = runtime_.options().device;
    const size_t n = static_cast<size_t>(p.batch) * p.heads_q * p.q_len * spec.head_dim;
    rt::DeviceBuffer out(2 * n, ordinal);
    out.fill(0xff);   // NaN in fp16 and bf16: an element the kernel did not write cannot pass
    AttentionCall call = sample_;
    call.spec = spec;
    call.o = bhsd(out.as<void>(), p.q_len, p.heads_q, spec.head_dim);
    call.lse = nullptr;
    rt::Stream stream(ordinal);
    runtime_.attention(call, stream.get());
    stream.synchronize();
    const std::vector<std::uint16_t> raw = out.to_vector<std::uint16_t>();
    std::vector<double> values(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) values[i] = rt::from_bits(spec.out, raw[i]);
    return values;
  }

  Runtime& runtime_;
  AttentionCall sample_;
  std::vector<double> reference_out_;   // the reference output, shared by every candidate
};

}  // namespace

QuantDecision calibrate(Runtime& runtime, const std::string& layer_key, const AttentionCall& sample,
                        const CalibrationOptions& options) {
  validate_layer_key(layer_key);
  validate_thresholds(options.thresholds);
  if (!sample.q.data || !sample.k.data || !sample.v.data) throw_bad_input("calibrate: the sample call needs q, k and v");
  require(validate(sample.spec));
  require(validate(sample.spec, sample.problem));
  runtime.resolve(sample.spec);   // no GPU (exit 3) or a foreign arch fails here, before any work
  const int ordinal = runtime.options().device;
  rt::synchronize_device(ordinal);   // the sample may have been written on any of the caller's streams

  // The runtime's cache layers: a decision shipped with the application is reused, new ones go to the
  // user layer.
  Runtime::Impl& impl = RuntimeAccess::impl(runtime);
  std::unique_ptr<rt::CacheDecisionStore> decisions;
  if (impl.store)
    decisions = std::make_unique<rt::CacheDecisionStore>(*impl.store, impl.device_key(), rt::toolchain_fingerprint());
  DeviceFormatEvaluator evaluator(runtime, sample);
  // The default ladder for this device's arch (4-bit and FP8 P·V rungs where they are the fast formats).
  CalibrationOptions with_ladder = options;
  if (with_ladder.candidates.empty()) with_ladder.candidates = default_quant_candidates(runtime.resolve(sample.spec));
  return calibrate_layer(layer_key, sample.spec, sample.problem, with_ladder, evaluator, decisions.get());
}

}  // namespace qattn
