#include "runtime/calls/call_layout.hpp"

#include <cstdint>

namespace qattn::rt {
namespace {

constexpr long long kElementBytes = 2;   // the caller's tensors are fp16 or bf16

// "" when every row of t starts a multiple of `bytes` bytes from address 0.
std::string rows_problem(const TensorView& t, long long bytes, const std::string& what) {
  const auto address = static_cast<long long>(reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(bytes));
  const long long elements = bytes / kElementBytes;
  if (address == 0 && t.sb % elements == 0 && t.sh % elements == 0 && t.ss % elements == 0) return "";
  return what + ": its rows must start " + std::to_string(bytes) + "-byte aligned (data " + std::to_string(bytes) +
         "-byte aligned, strides multiples of " + std::to_string(elements) + " elements); got data % " +
         std::to_string(bytes) + " = " + std::to_string(address) + ", strides sb " + std::to_string(t.sb) + ", sh " +
         std::to_string(t.sh) + ", ss " + std::to_string(t.ss);
}

}  // namespace

std::string input_layout_problem(const Spec& spec, const Tiling& tiling, const TensorView& q, const TensorView& k,
                                 const TensorView& v) {
  std::string why;
  if (!spec.quantized()) {
    const char* names[3] = {"q", "k", "v"};
    const TensorView* views[3] = {&q, &k, &v};
    for (int i = 0; i < 3 && why.empty(); ++i)
      why = rows_problem(*views[i], 16, std::string("the fp16/bf16 kernel reads ") + names[i] + " in 16-byte chunks");
    return why;
  }
  if (tiling.q_fused) why = rows_problem(q, 16, "the fused-Q kernel (_qf) reads q as given, in 16-byte chunks");
  if (why.empty() && spec.pv.fmt == Fmt::fp16) why = rows_problem(v, 16, "pv=fp16 reads v as given, in 16-byte chunks");
  return why;
}

std::string output_layout_problem(const Spec& spec, const TensorView& o) {
  return spec.quantized() ? rows_problem(o, 4, "the quantized kernels store o in element pairs")
                          : rows_problem(o, 16, "the fp16/bf16 kernel stores o in 16-byte chunks");
}

}  // namespace qattn::rt
