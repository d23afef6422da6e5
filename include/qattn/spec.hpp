// qattn::Spec — the one value type describing a requested kernel (attention or a linear layer), with one
// canonical text form.
//
// Grammar (tokens separated by spaces, any order when parsing; printed in this order, defaults omitted).
// Attention (prefill, decode):
//   <phase>                 prefill | decode | linear                            (required)
//   qk=<fmt>[:<gran>]       Q/K element format and scale granularity            (required)
//   pv=<fmt>[:<gran>]       P/V element format and V scale granularity          (required)
//   out=<fp16|bf16>         output element type                                  (required)
//   d=<n>                   head dimension                                       (required)
//   causal                  causal mask, aligned bottom-right                    (default: not causal)
//   gqa=<n>                 query heads per KV head                              (default 1)
//   splitk=<n>              KV splits (decode only)                   (default: the runtime chooses)
//   softmax=<mode>          exact | unified_max | sas                            (default exact)
//   accum=<mode>            P·V accumulation: fp32 | fp16 | two_level            (default fp32)
//   smooth=<q|k|v...>       smoothing steps, letters in the order q, k, v        (default none)
//   rotate=<none|hadamard>  Q and K through a signed Hadamard rotation before quantization (default none)
//   paged                   the KV cache is paged through a block table (decode)  (default contiguous)
//   varlen                  prefill over packed sequences of different lengths (cu_seqlens) (default: equal lengths)
//   flow=<auto|mma|gemv>    decode dataflow: tuned per call, tensor cores, or CUDA cores (default auto)
//   arch=<sm_XX>            sm_80 | sm_86 | sm_89 | sm_90 | sm_90a               (default: the device's)
// Linear layer (linear), C[M, N] = A[M, K] . W[N, K]^T (+ bias), M (tokens) given per call:
//   linear                  the phase                                            (required)
//   a=<fp16|bf16>           A's element type (activations)                       (required)
//   w=<fmt>[:<gran>]        weights: fp16 | bf16 | int8:per_channel | int4:per_group (groups of 128 k) (required)
//   out=<fp16|bf16>         C's element type                                     (required)
//   n=<n>  k=<n>            output and input features of the layer               (required)
//   bias                    C += bias[N]                                         (default: no bias)
//   flow=<auto|gemv|flat|gemm>  CUDA-core GEMV, flat GEMM, tiled GEMM, or chosen by M per call (default auto)
//   arch=<sm_XX>            as above
// A field of the other family is refused ("linear specs take no d=").
//   fmt  = fp16 | bf16 | int8 | int4 | fp8e4m3 | flashq
//   gran = per_tensor | per_block | per_warp | per_thread | per_token | per_channel | per_group | per_head
// Examples: "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal gqa=4 smooth=k arch=sm_90a",
//           "linear a=fp16 w=int4:per_group out=fp16 n=14336 k=4096 arch=sm_90a"
// parse(to_string(s)) == s for every spec, and to_string(parse(t)) == t for every canonical text t.
// The fields are listed once, in generator/spec_schema.cpp: that table drives operator==, the runtime's
// map key, this text form and the kernel-name tokens (include/qattn/kernel_name.hpp).
#pragma once
#include <string>
#include <string_view>

#include "qattn/abi.h"
#include "qattn/export.h"

QATTN_PUBLIC_BEGIN
namespace qattn {

enum class Phase : int { prefill = 0, decode = 1, linear = 2 };

// The largest n= and k= of a linear spec.
constexpr int kMaxLinearFeatures = 1 << 20;

// A concrete target architecture; `unset` means "the device's own", filled in by the runtime.
enum class Arch : int { unset = 0, sm_80 = 80, sm_86 = 86, sm_89 = 89, sm_90 = 90, sm_90a = 91 };

// Rotation of Q and K before quantization (prefill, token-local Q/K scales): `hadamard` multiplies
// each row by a fixed signed Hadamard matrix (templates/qattn/quant/quant_config.h), which leaves every
// q·k unchanged and spreads a channel of large variance over its block, where smoothing (a mean
// subtraction) cannot remove it (QuaRot; SageAttention2's HadmdAttn baseline).
enum class Rotation : int { none = 0, hadamard = 1 };

struct Operand {
  Fmt fmt = Fmt::fp16;
  Gran gran = Gran::none;
  bool operator==(const Operand& o) const { return fmt == o.fmt && gran == o.gran; }
  bool operator!=(const Operand& o) const { return !(*this == o); }
};

struct Spec {
  Phase phase = Phase::prefill;
  Operand qk;
  Operand pv;
  Fmt out = Fmt::fp16;
  int head_dim = 128;
  bool causal = false;
  int gqa = 1;
  int split_k = 0;            // 0: unset (decode: the runtime chooses the split count)
  SoftmaxMode softmax = SoftmaxMode::exact;
  Accum accum = Accum::fp32;
  int smooth = kSmoothNone;   // SmoothBits
  Rotation rotate = Rotation::none;
  bool paged = false;         // decode: KV cache addressed through a block table
  bool varlen = false;        // prefill: a batch of packed sequences of their own lengths (AttentionCall::cu_seqlens_q)
  Dataflow flow = Dataflow::automatic;   // decode: chosen per call (tuned), tensor cores or CUDA cores
  Arch arch = Arch::unset;
  // Linear layers only (the attention fields above keep their defaults there, and these theirs in attention).
  Fmt act = Fmt::fp16;        // a=: A's element type
  Operand weight;             // w=: W's format
  int n = 0;                  // output features (rows of W)
  int k = 0;                  // input features (columns of A and W)
  bool bias = false;

  bool quantized() const { return qk.fmt != Fmt::fp16 && qk.fmt != Fmt::bf16; }
  bool is_attention() const { return phase != Phase::linear; }
  bool operator==(const Spec& o) const;
  bool operator!=(const Spec& o) const { return !(*this == o); }
};

// Canonical text; parse() throws qattn::Error(bad_input) naming the bad token and what is accepted.
std::string to_string(const Spec& spec);
Spec parse_spec(std::string_view text);

// Token texts of the enums (shared by the spec grammar, kernel names, CLI and JSON output).
const char* to_string(Phase);
const char* to_string(Arch);
const char* to_string(Fmt);
const char* to_string(Gran);
const char* to_string(SoftmaxMode);
const char* to_string(Accum);
const char* to_string(Dataflow);
const char* to_string(Rotation);
std::string smooth_to_string(int smooth_bits);   // "none", "k", "qk", "qkv" ...
Arch parse_arch(std::string_view text);          // throws bad_input listing the accepted archs

// Compute capability of an arch as major*10+minor (sm_90a -> 90).
int arch_cc(Arch arch);

}  // namespace qattn
QATTN_PUBLIC_END
