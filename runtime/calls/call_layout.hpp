// The row alignment an attention call's caller tensors must have, by what the kernels move in one
// access. Pure host code (tested on the CPU); attention(), prepare() and run() turn a problem into a
// bad-input error before anything is launched, since a misaligned access on the GPU would end the
// whole CUDA context, not just the call.
#pragma once

#include <string>

#include "qattn/runtime.hpp"

namespace qattn::rt {

// Inputs (q, k, v: fp16/bf16, read at prepare()):
//   fp16/bf16 specs         the FP16 kernel copies 16-byte chunks of Q, K and V rows;
//   the fused-Q form (_qf)  the kernel reads Q itself, 16-byte chunks;
//   pv=fp16                 the kernel reads V as given, 16-byte chunks.
// The quantization passes read the other tensors and check them themselves (generator/quant_plan.hpp).
// Returns "" when every tensor the kernel reads directly qualifies, else a one-line reason.
std::string input_layout_problem(const Spec& spec, const Tiling& tiling, const TensorView& q, const TensorView& k,
                                 const TensorView& v);

// The output o (fp16/bf16, written at run()): the FP16 kernel stores 16-byte chunks of its rows, the
// quantized kernels element pairs (4 bytes).
std::string output_layout_problem(const Spec& spec, const TensorView& o);

}  // namespace qattn::rt
