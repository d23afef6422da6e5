// Runtime::tune_decode: the decode dataflow and split-K sweeps (tuner/decode_sweep.cpp) timed on this
// GPU through DecodeTimingBench, stored as the cache's decode_dataflow / decode_splits decisions, and
// installed for this runtime's flow=auto calls at once.
#include <cmath>

#include "qattn/error.hpp"
#include "generator/render.hpp"
#include "runtime/tuning/decode_timing.hpp"
#include "runtime/registry/runtime_impl.hpp"
#include "runtime/jit/toolchain.hpp"

namespace qattn {
namespace {

class GpuDecodeTimer final : public DecodeTimer {
 public:
  GpuDecodeTimer(Runtime::Impl& runtime, TimingOptions timing) : bench_(runtime), timing_(timing) {}
  double time_us(const Spec& spec, const Tiling& tiling, const Problem& problem, int splits) override {
    return median(bench_.samples_us(spec, tiling, problem, splits, timing_));
  }

 private:
  rt::DecodeTimingBench bench_;
  TimingOptions timing_;
};

}  // namespace

DecodeTuning Runtime::tune_decode(const Spec& spec_in, const SweepOptions& options_in) {
  Spec spec = resolve(spec_in);
  if (spec.phase != Phase::decode) throw_bad_input("tune_decode takes a decode spec; got '" + to_string(spec) + "'");
  if (spec.qk.fmt == Fmt::flashq)
    throw_bad_input("tune_decode covers the row-cache formats (fp16, bf16, int8, int4, fp8e4m3); a flashq "
                    "family keeps the default dataflow (mma) and split heuristic");
  spec.split_k = 0;
  SweepOptions options = options_in;
  if (options.limits.max_smem_per_block <= 0) options.limits = impl_->limits();
  // Every path's kernels compiled up front, in parallel (the sweep would otherwise compile them one by
  // one as it meets them); the binary cache then serves each load.
  if (options.paths.empty()) options.paths = decode_paths(spec, options.limits);
  std::vector<gen::Source> sources;
  for (const DecodePath& path : options.paths) {
    Spec with_flow = spec;
    with_flow.flow = path.flow;
    for (const Tiling& tiling : path.tilings) sources.push_back(gen::render_kernel(with_flow, tiling));
  }
  for (const rt::Binary& b : impl_->binaries->get(sources))
    if (!b.error.empty()) throw Error(ErrorKind::failure, "tune_decode: " + b.kernel_name + " does not compile: " + b.error);
  GpuDecodeTimer timer(*impl_, impl_->options.timing);
  DecodeTuning t;
  t.dataflow = sweep_dataflow(spec, options, timer);
  t.splits = sweep_splits(spec, options, timer, &t.dataflow);

  auto table = std::make_shared<DecodeDispatch>();
  table->set_dataflow(t.dataflow);
  table->set_splits(t.splits);
  const std::string family = decode_family_key(spec);
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (impl_->store && !impl_->options.read_only) {
    // Two rows, each its own transaction: the dataflow decision is useful without the split one.
    for (const bool dataflow : {true, false}) {
      cache::DecisionRecord rec;
      rec.kind = dataflow ? kDecodeDataflowKind : kDecodeSplitsKind;
      rec.key = family;
      rec.device = impl_->device_key();
      rec.toolchain = rt::toolchain_fingerprint();
      rec.json = dataflow ? dump_decision(t.dataflow) : dump_decision(t.splits);
      impl_->store->put_decision(rec);
    }
  }
  Spec family_spec = spec;   // decode_dispatch()'s key: the family, flow left to the table
  family_spec.flow = Dataflow::automatic;
  impl_->decode_dispatches[Impl::spec_fields(family_spec)] = table;
  return t;
}

bool Runtime::decode_tuned(const Spec& spec_in) {
  const Spec spec = resolve(spec_in);
  if (!impl_->store) return false;
  const std::string family = decode_family_key(spec);
  const cache::DeviceKey dev = impl_->device_key();
  const std::string& tc = rt::toolchain_fingerprint();
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  return impl_->store->get_decision(kDecodeDataflowKind, family, dev, tc) &&
         impl_->store->get_decision(kDecodeSplitsKind, family, dev, tc);
}

}  // namespace qattn
