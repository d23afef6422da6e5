// The accuracy gate: does a kernel compute what its spec's format computes? The tuner (every candidate),
// `qattn run` and Runtime::check ask it after running a kernel on check_against_reference's data.
//
// A fixed cosine floor against exact float64 attention catches a wrong kernel only while the format
// itself stays above the floor on the check's data. A lossy format (INT4 Q/K on data with large Q
// channels) lands below any useful floor however right its kernel is, and choosing formats is
// calibrate's job, not the gate's. So a quantized kernel passes when
//   (a) its cosine against exact attention reaches min_cosine(spec), or
//   (b) the format's own numerics (reference/format_sim.hpp: the same quantization in float64, every
//       other step exact) miss that floor on the same data, and the kernel's error against exact
//       attention is at most kFormatErrorRatio times the format's plus kFormatErrorSlack (relative L2).
// A kernel that reads wrong data, drops keys or mis-scales is far outside (b): its error adds to the
// format's instead of being the format's. Every output element must be finite in both cases.
#pragma once
#include <string>
#include <vector>

#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"
#include "reference/attention.hpp"
#include "reference/format_sim.hpp"
#include "reference/metrics.hpp"

namespace qattn::rt {

// The cosine a quantized spec's output must reach against exact attention on the check's data: 0.995,
// 0.99 where Q/K or V has a single per_tensor scale, 0.98 for INT4 Q/K (accuracy_gate.cpp says why).
double min_cosine(const Spec& spec);

// (b)'s bound: relative L2 error of the kernel <= kFormatErrorRatio * the format's + kFormatErrorSlack.
constexpr double kFormatErrorRatio = 1.25;
constexpr double kFormatErrorSlack = 0.02;

// The float64 simulation of a quantized prefill spec's format as `tiling` runs it (scale groups, smoothing,
// rotation, P and V formats, the KV tile P is quantized against, causal alignment).
reference::sim::SimConfig format_numerics(const Spec& spec, const Tiling& tiling);

// The listed output rows computed through format_numerics(spec, tiling), from host copies of Q, K, V in
// [b, h, s, d] order (the values the kernel was given). Same order and layout as reference::attention_rows.
std::vector<double> simulate_format_rows(const Spec& spec, const Tiling& tiling, const std::vector<float>& q,
                                         const std::vector<float>& k, const std::vector<float>& v,
                                         const reference::Dims& dims, const std::vector<reference::RowId>& rows);

struct GateVerdict {
  bool passed = false;
  std::string reason;   // one line: which rule passed or failed, with the numbers
};
// kernel: the kernel against exact attention; format: the format's simulation against exact attention
// (null for fp16/bf16 specs, or when not computed: then only rule (a) applies).
GateVerdict accuracy_gate(const Spec& spec, const reference::ErrorMetrics& kernel, const reference::ErrorMetrics* format);

}  // namespace qattn::rt
