// qattn::calibrate — adaptive quantization per layer (SageAttention2 §3.6, "SageAttn-mix"): some layers
// quantize badly and stay bad across inputs, so each layer gets the CHEAPEST quantized format whose
// output stays within user thresholds of the FP16/BF16 kernel, measured once on sample Q/K/V of that
// layer and kept in the SQLite cache under the user's layer key (decision kind "quant_format").
//
//   reference  the family spec with fp16/bf16 Q/K/V ("prefill out=fp16 d=128 causal gqa=4"): the kernel
//              every candidate is compared with, and the fallback when no candidate is close enough.
//   candidates quantized variants of the reference, CHEAPEST FIRST; the first one that meets the
//              thresholds wins. The list is data: formats added later (INT4, FP8) slot in as rows, and
//              a row the build cannot run yet (validate() says no) is reported as unsupported, never chosen.
//   metrics    cosine similarity and relative L1 of the whole output against the reference kernel's output
//              (SageAttention2 §3.5's kernel metrics), computed on the host in float64.
//
// Typical use (the CLI: `qattn calibrate`):
//   QuantDecision d = calibrate(runtime, "llama3.layers.7.attn", sample_call);   // measures or reuses
//   call.spec = d.chosen;  runtime.attention(call, stream);                      // every later call
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qattn/export.h"
#include "qattn/problem.hpp"
#include "qattn/spec.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

class Runtime;
struct AttentionCall;

// ---- thresholds and metrics ------------------------------------------------------------------------

struct QuantThresholds {
  double min_cosine = 0.999;   // candidate passes when cosine >= min_cosine ...
  double max_rel_l1 = 0.05;    // ... and relative L1 <= max_rel_l1 (both bounds inclusive)
};
// Throws bad_input unless 0 < min_cosine <= 1 and 0 <= max_rel_l1 < inf (NaN is rejected).
void validate_thresholds(const QuantThresholds& thresholds);

constexpr double kNoMetric = std::numeric_limits<double>::quiet_NaN();

// A candidate's output against the reference output, over every element, in float64.
struct FormatMetrics {
  double cosine = kNoMetric;    // <ref, got> / (|ref| |got|); 1 when both are all zero
  double rel_l1 = kNoMetric;    // sum |got - ref| / sum |ref|
  double rmse = kNoMetric;      // sqrt(mean (got - ref)^2)
  double max_abs = kNoMetric;   // max |got - ref|
  long long non_finite = 0;     // NaN/inf elements in the candidate's output
};
// Sizes must match (bad_input otherwise). Non-finite elements are counted and make the metrics NaN.
FormatMetrics compare_outputs(const std::vector<double>& reference, const std::vector<double>& got);
// True only for finite metrics, no non-finite output, cosine >= min and rel_l1 <= max.
bool meets(const FormatMetrics& metrics, const QuantThresholds& thresholds);

// ---- the measuring, behind an interface so the choice is tested on the CPU with a fake -------------

class FormatEvaluator {
 public:
  virtual ~FormatEvaluator() = default;
  // Metrics of `candidate`'s output against `reference`'s on the evaluator's sample data. A candidate
  // that cannot run throws qattn::Error (recorded as failed; the next candidate is tried), except
  // no_gpu, which ends the calibration.
  virtual FormatMetrics evaluate(const Spec& candidate, const Spec& reference) = 0;
  // Called once before any candidate: runs the reference and throws when it cannot give a usable
  // output, which ends the calibration (nothing is stored: every metric would be meaningless).
  virtual void prepare_reference(const Spec& reference) { (void)reference; }
};

// ---- specs --------------------------------------------------------------------------------------------

// The reference spec of a family text: a prefill spec without Q/K/V formats ("prefill out=fp16 d=128
// causal gqa=4"; qk=/pv= may be given if they equal out). Throws bad_input naming what is wrong.
Spec parse_spec_family(std::string_view text);

// The default ladder, cheapest first, for a reference spec (its out, d, causal, gqa, arch are kept):
//   with a concrete arch, first the formats that are faster there, each plain and then with
//   rotate=hadamard, all smooth=kv with per-channel V:
//     sm_80, sm_86: qk=int4:per_thread (native INT4 mma), pv=int8;
//     sm_89:        qk=int4:per_thread, then qk=int8:per_warp, pv=fp8e4m3;
//     sm_90a:       qk=int8:per_warp, pv=fp8e4m3 (wgmma .e4m3; INT4 would run as int8 compute);
//     sm_90:        none;
//   then, for every arch (and alone when the arch is unset): int8 Q/K per_tensor, then per_block, then
//   per_token; at each granularity: no smoothing with per-tensor V, K smoothing with per-tensor V, then
//   K+V smoothing with per-channel V. calibrate() builds it for the device's arch.
// The order is nominal (finer scale groups and smoothing passes cost more work); pass your own list,
// e.g. ordered by `qattn run` timings on your GPU, in CalibrationOptions::candidates.
std::vector<Spec> default_quant_candidates(const Spec& reference);

// ---- the decision -----------------------------------------------------------------------------------------

enum class CandidateVerdict {
  passed,            // met both thresholds
  below_threshold,   // finite metrics, but cosine too low or relative L1 too high
  non_finite,        // NaN/inf in the output or the metrics
  unsupported,       // validate() rejects the spec or the sample shape; not run
  failed,            // threw while compiling or running
};
const char* to_string(CandidateVerdict verdict);

struct CandidateResult {
  Spec spec;
  CandidateVerdict verdict = CandidateVerdict::unsupported;
  FormatMetrics metrics;   // NaN when not measured
  std::string detail;      // why it failed or was not run; "" when measured
};

struct QuantDecision {
  std::string layer_key;
  Spec reference;           // the fp16/bf16 spec compared against
  Spec chosen;              // the cheapest passing candidate, or `reference` when none passed
  bool fallback = false;    // true: no candidate passed and `chosen` is the reference
  std::string reason;       // one line: why `chosen`
  QuantThresholds thresholds;
  std::string problem;      // shape of the sample data measured, e.g. "b=1,hq=32,hkv=8,q=1024,kv=1024"
  std::string inputs;       // what the sample data was, e.g. "random-outliers seed=1" or a file name
  std::vector<CandidateResult> candidates;   // every candidate, cheapest first
  long long created_at = 0;                  // unix seconds when measured (0: not stored)

  // Not stored: how this result was obtained ("measured", "reused from the cache", or "re-measured:
  // the stored decision was for other thresholds" ...).
  bool from_cache = false;
  std::string cache_note;
};

// The versioned JSON stored in the cache (format "qattn.quant_format", version 1). NaN metrics are null.
std::string decision_to_json(const QuantDecision& decision);
// Throws bad_input naming the field for malformed JSON, another format or version, or a bad spec.
QuantDecision decision_from_json(std::string_view json);

// Layer keys are the user's names for layers: non-empty, printable ASCII (0x20..0x7e), no leading or
// trailing space, at most 200 characters. Throws bad_input saying which rule failed.
constexpr size_t kMaxLayerKeyLength = 200;
void validate_layer_key(std::string_view key);

// Measures every candidate (validate()d against `problem` first) and picks the cheapest passing one.
// No cache involved. Throws bad_input for a bad key, thresholds or a non-fp16/bf16 reference.
QuantDecision choose_format(const std::string& layer_key, const Spec& reference, const Problem& problem,
                            const std::vector<Spec>& candidates, const QuantThresholds& thresholds,
                            FormatEvaluator& evaluator);

// ---- reuse through a decision store ---------------------------------------------------------------------

// Where decisions live: the runtime's SQLite cache (kind "quant_format", this device and toolchain) in
// runtime/tuning/calibrate.cpp, or a test double.
class DecisionStore {
 public:
  virtual ~DecisionStore() = default;
  virtual std::optional<std::string> load(const std::string& layer_key) = 0;   // the stored JSON
  virtual void save(const std::string& layer_key, const std::string& json) = 0;
};

struct CalibrationOptions {
  QuantThresholds thresholds;
  std::vector<Spec> candidates;   // empty: default_quant_candidates(reference)
  bool force = false;             // measure again even when a usable decision is stored
  std::string inputs;             // description of the sample data, kept in the decision
};

// Returns the stored decision without measuring when it is usable (same reference spec, thresholds and
// candidate list; readable), else measures with `evaluator`, saves (when `store` is set) and returns.
QuantDecision calibrate_layer(const std::string& layer_key, const Spec& reference, const Problem& problem,
                              const CalibrationOptions& options, FormatEvaluator& evaluator,
                              DecisionStore* store);

// The GPU path: `sample` is an fp16/bf16 attention call whose spec is the reference (spec.out = the
// element type of q, k, v) over sample Q/K/V of the layer, already on the runtime's device (sample.o and
// sample.lse are not used). Waits for the device to be idle first, so inputs written on any stream are
// complete. Each format runs through Runtime::attention into a buffer of its own; outputs are compared
// on the host. Uses the runtime's cache file (none when the cache is off; nothing written when read-only).
// Throws Error(no_gpu) without a GPU, bad_input for a bad key, thresholds or call.
QuantDecision calibrate(Runtime& runtime, const std::string& layer_key, const AttentionCall& sample,
                        const CalibrationOptions& options = CalibrationOptions());

// ---- sample files (`qattn calibrate --inputs F`) ----------------------------------------------------------
//
// A raw dump of one layer's Q, K, V with a small JSON header, all little-endian:
//   bytes [0, 8)        magic "QATTNSMP"
//   bytes [8, 12)       n = length of the header, uint32
//   bytes [12, 12 + n)  JSON: {"version": 1, "dtype": "fp16"|"bf16", "layout": "bshd"|"bhsd",
//                              "b": B, "hq": HQ, "hkv": HKV, "q": SQ, "kv": SKV, "d": D}
//   then Q (B*SQ*HQ*D elements), K and V (B*SKV*HKV*D elements each), 2 bytes per element, each tensor
//   contiguous in `layout`; nothing after V. From numpy (q, k, v float16 arrays in [b, s, h, d]):
//     h = json.dumps({"version":1,"dtype":"fp16","layout":"bshd","b":B,"hq":HQ,"hkv":HKV,"q":SQ,"kv":SKV,"d":D}).encode()
//     open(f, "wb").write(b"QATTNSMP" + struct.pack("<I", len(h)) + h + q.tobytes() + k.tobytes() + v.tobytes())
struct SampleFile {
  Fmt dtype = Fmt::fp16;
  bool bhsd = false;   // false: [b, s, h, d]
  Problem problem;
  int head_dim = 0;
  size_t q_offset = 0, k_offset = 0, v_offset = 0;   // byte offsets of the tensors in the file
  size_t q_bytes = 0, kv_bytes = 0;                  // bytes of Q, and of K (= of V)
};
// Checks the magic, header fields and the exact file size; throws bad_input naming the problem.
SampleFile parse_sample_file(const std::vector<unsigned char>& bytes);
// The bytes of a sample file (for tests and tools); the tensors' sizes must match the header.
std::vector<unsigned char> encode_sample_file(const SampleFile& header, const std::vector<std::uint16_t>& q,
                                              const std::vector<std::uint16_t>& k,
                                              const std::vector<std::uint16_t>& v);

}  // namespace qattn
QATTN_PUBLIC_END
