// The high-level call: FP16/BF16 tensors in, quantization (for quantized specs) into a workspace, then
// the attention kernel. prepare() does the first half, run() the second.
#include <cmath>

#include "qattn/error.hpp"
#include "qattn/quant/quant_shape.h"
#include "runtime/device_buffer.hpp"
#include "runtime/runtime_impl.hpp"

namespace qattn {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

TensorRef ref_of(const TensorView& t) { return TensorRef{t.data, t.sb, t.sh, t.ss, 1}; }

// One quantized operand: the request for the quantizer and where its outputs live in the workspace.
struct QuantSlot {
  quant::QuantRequest request;
  quant::QuantProblem problem;
  quant::QuantPlan plan;
  size_t codes = 0, scales = 0, mean = 0;   // byte offsets in the workspace
  TensorRef y{};
};

class Prepared final : public PreparedAttention {
 public:
  const Kernel& kernel() const override { return *kernel_; }
  const Problem& problem() const override { return problem_; }
  std::shared_ptr<LoadedKernel> kernel_;
  Problem problem_;
  AttentionParams params{};
  rt::DeviceBuffer workspace;
};

std::string quant_kernel_name(const quant::QuantRequest& r, const quant::QuantLaunch& l) {
  std::string g = r.gran == Gran::per_token ? "tok" : r.gran == Gran::per_block ? "blk" + std::to_string(r.group)
                : r.gran == Gran::per_tensor ? "ten" : "chn";
  return std::string("qattn_quant_") + (r.in == Fmt::bf16 ? "bf16" : "f16") + "_i8" + g + (r.smooth ? "_smooth" : "") +
         (r.transpose ? "_vt" : "") + "_d" + std::to_string(r.d) + "__" + l.tag;
}

Source quant_source(const quant::QuantRequest& r, const quant::QuantLaunch& l, Arch arch) {
  Source s;
  s.kernel_name = quant_kernel_name(r, l);
  s.arch = arch;
  s.text = "// qattn generated quantization pass\n#include \"qattn/quant/quant.cuh\"\n"
           "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(l.block) + ") " + s.kernel_name +
           "(const qattn::QuantParams p) {\n  " + l.pass + "::run(p);\n}\n";
  return s;
}

void validate_call(const AttentionCall& c, const Spec& spec) {
  require(validate(spec, c.problem));
  for (const TensorView* t : {&c.q, &c.k, &c.v})
    if (!t->data) throw_bad_input("attention input tensor is null; pass device pointers for q, k and v");
}

}  // namespace

TensorView bshd(void* data, int seq, int heads, int d) {
  return TensorView{data, static_cast<long long>(seq) * heads * d, d, static_cast<long long>(heads) * d};
}
TensorView bhsd(void* data, int seq, int heads, int d) {
  return TensorView{data, static_cast<long long>(heads) * seq * d, static_cast<long long>(seq) * d, d};
}

std::unique_ptr<PreparedAttention> Runtime::prepare(const AttentionCall& call, void* stream) {
  const Spec spec = resolve(call.spec);
  validate_call(call, spec);
  const Kernel& k = kernel(spec, call.problem);
  return prepare_with(call, k.tiling(), stream);
}

std::unique_ptr<PreparedAttention> Runtime::prepare_with(const AttentionCall& call, const Tiling& tiling, void* stream) {
  const Spec spec = resolve(call.spec);
  validate_call(call, spec);
  const Problem& p = call.problem;
  auto out = std::make_unique<Prepared>();
  out->problem_ = p;
  out->kernel_ = impl_->load(spec, tiling);
  AttentionParams& ap = out->params;
  ap.batch = p.batch;
  ap.heads_q = p.heads_q;
  ap.heads_kv = p.heads_kv;
  ap.q_len = p.q_len;
  ap.kv_len = p.kv_len;
  if (!spec.quantized()) {
    ap.q = ref_of(call.q);
    ap.k = ref_of(call.k);
    ap.v = ref_of(call.v);
    return out;
  }
  // Quantized: Q and K as int8 rows [b, h, s, d]; V as int8 V^T per head, padded to kVPadTokens.
  const int d = spec.head_dim;
  const int group = spec.qk.gran == Gran::per_block ? 64 : 0;
  const int kv_pad = (p.kv_len + kVPadTokens - 1) / kVPadTokens * kVPadTokens;
  QuantSlot slots[3];
  slots[0].request = {spec.out, spec.qk.gran, group, false, false, d};
  slots[0].problem = {p.batch, p.heads_q, p.q_len, p.q_len};
  slots[1].request = {spec.out, spec.qk.gran, group, (spec.smooth & kSmoothK) != 0, false, d};
  slots[1].problem = {p.batch, p.heads_kv, p.kv_len, p.kv_len};
  slots[2].request = {spec.out, spec.pv.gran, 0, false, true, d};
  slots[2].problem = {p.batch, p.heads_kv, p.kv_len, kv_pad};
  size_t bytes = 0, scratch_floats = 0;
  for (QuantSlot& s : slots) {
    s.plan = quant::plan_quant(s.request, s.problem);
    const long long rows = static_cast<long long>(s.problem.batch) * s.problem.heads;
    s.codes = bytes;
    bytes = align_up(bytes + static_cast<size_t>(rows) * s.problem.seq_pad * d);
    s.scales = bytes;
    bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(s.plan.scale_floats));
    s.mean = bytes;
    bytes = align_up(bytes + sizeof(float) * static_cast<size_t>(s.plan.mean_floats));
    scratch_floats = std::max(scratch_floats, static_cast<size_t>(s.plan.scratch_floats));
  }
  const size_t scratch = bytes;
  bytes = align_up(bytes + sizeof(float) * scratch_floats);
  out->workspace = rt::DeviceBuffer(bytes, impl_->options.device);
  char* base = out->workspace.as<char>();
  const TensorView inputs[3] = {call.q, call.k, call.v};
  const CUstream cu_stream = static_cast<CUstream>(stream);
  for (int i = 0; i < 3; ++i) {
    QuantSlot& s = slots[i];
    const long long heads = s.problem.heads, seq = s.problem.seq_pad;
    s.y = s.request.transpose ? TensorRef{base + s.codes, heads * d * seq, d * seq, 1, seq}
                              : TensorRef{base + s.codes, heads * seq * d, seq * d, d, 1};
    QuantParams qp{};
    qp.x = ref_of(inputs[i]);
    qp.y = s.y;
    qp.scale = quant::dense_scale_ref(s.request, s.problem, reinterpret_cast<float*>(base + s.scales));
    qp.mean = s.plan.mean_floats ? reinterpret_cast<float*>(base + s.mean) : nullptr;
    qp.amax_scratch = scratch_floats ? reinterpret_cast<float*>(base + scratch) : nullptr;
    qp.batch = s.problem.batch;
    qp.heads = s.problem.heads;
    qp.seq_len = s.problem.seq_len;
    qp.seq_pad = s.problem.seq_pad;
    qp.d = d;
    qp.qmax = 127.f;
    const std::string err = quant::quant_params_error(s.request, qp);
    if (!err.empty()) throw_bad_input("cannot quantize " + std::string("qkv").substr(static_cast<size_t>(i), 1) + ": " + err);
    for (const quant::QuantLaunch& l : s.plan.launches) {
      if (l.zero_scratch_floats > 0)
        rt::fill_bytes_async(reinterpret_cast<CUdeviceptr>(qp.amax_scratch), 0,
                             sizeof(float) * static_cast<size_t>(l.zero_scratch_floats), cu_stream, impl_->options.device);
      auto fn = impl_->load_source(quant_source(s.request, l, spec.arch));
      fn->launch(rt::Dim3{l.grid[0], l.grid[1], l.grid[2]}, rt::Dim3{l.block, 1, 1}, l.smem_bytes, cu_stream, qp);
    }
    if (i == 0) { ap.q = s.y; ap.q_scale = qp.scale; }
    if (i == 1) { ap.k = s.y; ap.k_scale = qp.scale; }
    if (i == 2) { ap.v = s.y; ap.v_scale = qp.scale; }
  }
  return out;
}

void Runtime::run(const PreparedAttention& prepared_in, TensorView o, float softmax_scale, float* lse, void* stream) {
  const auto& prepared = dynamic_cast<const Prepared&>(prepared_in);
  if (!o.data) throw_bad_input("attention output tensor is null; pass a device pointer for o");
  AttentionParams p = prepared.params;
  p.o = ref_of(o);
  p.lse = lse;
  const int d = prepared.kernel().spec().head_dim;
  p.softmax_scale = softmax_scale > 0 ? softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  prepared.kernel().launch(p, prepared.problem(), stream);
}

void Runtime::attention(const AttentionCall& call, void* stream) {
  const auto prepared = prepare(call, stream);
  run(*prepared, call.o, call.softmax_scale, call.lse, stream);
  // The workspace is freed with `prepared`: cuMemFree synchronizes, so the kernels above have finished.
}

}  // namespace qattn
