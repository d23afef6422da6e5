// Kernel forms and launch orders that measurements compare (A/B), not choices a user makes: each pair
// gives the same results, and the defaults are the forms measured fastest (docs/perf.md). They are set
// from the environment's experiment knobs (env/env.hpp, docs/environment.md) when a Runtime is made;
// the library's tests set them per Runtime through experiment_options().
#pragma once

namespace qattn {
class Runtime;
}

namespace qattn::rt {

struct ExperimentOptions {
  // Quantized prefill with token-local Q scales (per_token, per_warp, per_thread, per_block; no smooth=q,
  // rotate or packed int4): attention() and prepare() launch the chosen tiling's fused-Q twin (_qf), whose
  // kernel quantizes its own Q tile, instead of a Q quantization pass before the plain kernel. The tuner
  // verifies and times each candidate in this form too (rt::GpuCandidateRunner). QATTN_FUSE_Q=0: off.
  bool fuse_q_quant = true;
  // Quantized prefill in the wgmma form (sm_90a) at d 64 / 128: the TMA twin (_tma), whose K / V^T tiles
  // one thread loads as tensor-map boxes on an mbarrier, instead of every thread's cp.async. Like
  // fuse_q_quant for the tuner and prepare_with(). QATTN_TMA=0: off.
  bool tma_loads = true;
  // Causal INT8 prefill in the wgmma form: heads per band of its schedule, heaviest query tiles first
  // within a band (templates/qattn/attention/tile_order.h). 0: as many heads as have their K and V fit
  // half of the device's L2 (attention_band_heads); 1: head by head. Only reorders CTAs: same output bits.
  // QATTN_CAUSAL_BAND=<n>.
  int causal_band_heads = 0;
  // Quantized prefill: V's quantization passes (and Q's, where Q has passes and K too) on side streams of
  // the runtime, concurrently with K's on the caller's stream, which waits for them (events) before the
  // attention kernel. The side streams wait for everything queued on the caller's stream first, so the
  // caller sees one stream's ordering. Same output bits. Only from rt::kForkMinRows K/V rows
  // (attention_stage.hpp). QATTN_CONCURRENT_PASSES=0: off.
  bool concurrent_passes = true;
  // K/V smoothing and per_channel V scales: quantize in one pass over the input (head-synchronised
  // blocks, templates/qattn/quant/head_sync.cuh) when a head fits, instead of a statistics pass and then
  // the quantizer. Not used where K's mean is sampled (RuntimeOptions::k_mean_sample_tokens): it would
  // save no second full read. Off, the form is still taken where an operand fits one wave
  // (rt::one_pass_fits). QATTN_QUANT_ONE_PASS=1: on wherever a head fits.
  bool quant_one_pass = false;
  // Attention plans: a run's launches are recorded and replayed as a CUDA graph kept by the plan (one per
  // stream; runtime/device/launch_graph.hpp), updated in the nodes whose pointers changed, instead of
  // enqueued one by one. Same launches, same output bits, less host time. Not inside a caller's stream
  // capture, and not for a stage that forks. QATTN_PLAN_GRAPHS=0: off.
  bool plan_graphs = true;

  // The defaults above with the environment's knobs applied.
  static ExperimentOptions from_environment();
};

// The options `runtime` launches with (set from the environment at its construction); for the library's
// own tests and benchmarks, which compare the two sides of a knob in one process.
ExperimentOptions& experiment_options(Runtime& runtime);

}  // namespace qattn::rt
