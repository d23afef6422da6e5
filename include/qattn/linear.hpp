// Linear layers: C[M, N] = A[M, K] . W[N, K]^T (+ bias[N]), the other half of FlashDecoding++ (its
// §4-§5): a CUDA-core GEMV for the fewest tokens, a flat GEMM on tensor cores (tokens padded to 8 on
// the mma's narrow side) for a few, a tiled GEMM for many, chosen by M.
//
// Spec: `linear a=<fp16|bf16> w=<fmt> out=<fp16|bf16> n=<N> k=<K> [bias] [flow=auto|gemv|flat|gemm]`
// with w one of
//   fp16 / bf16        W as given (A's type), [N, K];
//   int8:per_channel   symmetric codes, W[n][k] = code * scale[n] (W8A16);
//   int4:per_group     asymmetric, two codes per byte (the low nibble holds the even k), unsigned 0..15,
//                      W[n][k] = (code - zero[g]) * scale[g] for g = n * (K / 128) + k / 128 (W4A16).
// K must be a multiple of 8 (16-bit W), 16 (int8) or 128 (int4); N any. The byte layouts are those of
// qattn::LinearParams (templates/qattn/abi.h); pack_linear_weight() writes them from float weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qattn/abi.h"
#include "qattn/export.h"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

QATTN_PUBLIC_BEGIN
namespace qattn {

// A layer's weights on the device, in the spec's w= format.
struct LinearWeights {
  const void* w = nullptr;        // 16-bit [n, k]; int8 [n, k] codes; int4 [n, k / 2] bytes
  long long ldw = 0;              // row stride: elements (16-bit W) or bytes (int8, int4); 0: rows packed
  const float* scale = nullptr;   // int8: [n]; int4: [n, k / 128]
  const float* zero = nullptr;    // int4: [n, k / 128] zero points in code units
  const void* bias = nullptr;     // spec `bias`: [n] of out's type
};

// One linear call. a, c and the weights are device pointers, 16-byte aligned, with row strides (lda,
// ldw) that keep every row 16-byte aligned; ldc any (>= n).
struct LinearCall {
  Spec spec;                  // phase linear; arch may be unset (the device's); flow=auto: chosen by m
  const void* a = nullptr;    // [m, k] of a='s type
  long long lda = 0;          // elements; 0: k
  LinearWeights weights;
  void* c = nullptr;          // [m, n] of out's type
  long long ldc = 0;          // elements; 0: n
  int m = 0;                  // tokens, >= 1
  Tiling tiling{0, 0, 0, 0};  // block_m 0: the tuned or default tiling of the chosen flow
  int splits = 0;             // split-K count; 0: the tuned or default count
};

// What a linear call launches (Runtime::linear_route): the flow chosen for m, the kernel and its split-K.
struct LinearRoute {
  Spec spec;          // flow resolved (gemv, flat or gemm)
  Tiling tiling;
  int splits = 1;
  int k_split = 0;    // input features per split (a multiple of the kernel's k step)
  bool tuned = false; // the flow came from a stored inflection table (else the default rule)
  std::string kernel; // kernel name
};

// A linear call decided once and run many times (Runtime::plan_linear): spec, m, strides, dataflow, tiling
// and split count are the plan's, its kernel loaded; a run (Runtime::run(plan, LinearRun)) takes device
// pointers only and compiles, allocates and synchronizes nothing, so it may be captured in a CUDA graph,
// even as the first run. Split-K's tile counters and partials: the plan's own workspace (one run at a
// time: order the runs, e.g. on one stream) unless a run passes one of workspace_bytes(), zeroed by the
// caller before its first use (every run leaves it zeroed: the last CTA of each tile resets its counter).
class LinearPlan {
 public:
  virtual ~LinearPlan() = default;
  virtual const LinearRoute& route() const = 0;
  virtual int m() const = 0;
  virtual size_t workspace_bytes() const = 0;   // 0 without split-K
};

// One run of a linear plan: the call's device pointers; m 0: the plan's, else 1 .. the plan's (the same
// kernel and split count over fewer tokens).
struct LinearRun {
  const void* a = nullptr;
  LinearWeights weights;    // ldw is the plan's
  void* c = nullptr;
  int m = 0;
  void* workspace = nullptr;   // null: the plan's own; else workspace_bytes(), 256-byte aligned, zeroed once
};

// The flow an untuned call takes for m tokens (FlashDecoding++'s M1 and M2 before any measurement):
// gemv below kDefaultLinearM1, flat below kDefaultLinearM2, else gemm. A tuned table replaces it.
constexpr int kDefaultLinearM1 = 4;
constexpr int kDefaultLinearM2 = 64;
Dataflow default_linear_flow(int m);

// Weights in the spec's format from float weights w [n, k] (row-major), on the host: what an
// application does once, offline or at load time. int8:per_channel: scale[n] = max |w[n][:]| / 127,
// code = round(w / scale); int4:per_group: per group of 128, scale = (max - min) / 15,
// zero = round(-min / scale) clamped to 0..15, code = clamp(round(w / scale) + zero, 0, 15); 16-bit:
// the rounded elements (bits as uint16). Throws bad_input for a spec that is not a valid linear spec.
struct PackedLinearWeight {
  std::vector<std::uint8_t> bytes;   // the device layout of LinearWeights::w (rows packed)
  std::vector<float> scale;          // int8: [n]; int4: [n, k / 128]; empty for 16-bit
  std::vector<float> zero;           // int4: [n, k / 128]; else empty
};
PackedLinearWeight pack_linear_weight(const Spec& spec, const float* w);
// The float value the kernels see for W[n][kk] of a packed weight (the dequantization, on the host).
double unpacked_weight(const Spec& spec, const PackedLinearWeight& packed, int n, int kk);

}  // namespace qattn
QATTN_PUBLIC_END
