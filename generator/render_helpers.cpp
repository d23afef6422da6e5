#include "generator/render_helpers.hpp"

#include <string>

#include "generator/template_args.hpp"
#include "qattn/error.hpp"
#include "qattn/validate.hpp"

namespace qattn::gen {
namespace {

using namespace template_args;

const char* kLseHeader = "qattn/attention/lse_correction.cuh";
const char* kFlashqHeader = "qattn/decode/flashq_pack.cuh";

// `body` names a type with `static __device__ void run(const <params_type>&)`, declared in `header`.
// min_blocks > 0: the second __launch_bounds__ argument (blocks per SM the registers must allow).
Source render_helper(const HelperKernel& helper, const std::string& header, const std::string& body,
                     const std::string& params_type, unsigned block, Arch arch, unsigned min_blocks = 0) {
  Source src;
  src.kernel_name = helper_kernel_name(helper);
  src.arch = arch;
  src.text = "// qattn generated helper kernel\n#include \"" + header +
             "\"\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(block) +
             (min_blocks ? ", " + std::to_string(min_blocks) : std::string()) + ") " + src.kernel_name + "(const " +
             params_type + " p) {\n  " + body + "::run(p);\n}\n";
  return src;
}

HelperKernel of_spec(KernelFamily family, const Spec& spec, const char* op = "") {
  HelperKernel h;
  h.family = family;
  h.in = spec.out == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16;
  h.head_dim = spec.head_dim;
  h.op = op;
  return h;
}

std::string flashq_args(const Spec& spec, bool paged) {
  if (spec.qk.fmt != Fmt::flashq)
    throw_bad_input("the flashq kernels take a flashq spec (qk=flashq:per_channel), got '" + to_string(spec) + "'");
  require(validate(spec));
  return std::string("<") + fmt_enum(spec.out) + ", " + std::to_string(spec.head_dim) +
         (paged ? std::string(", ") + flag(spec.paged) : std::string()) + ">";
}

Source flashq_source(const char* op, const char* type, const Spec& spec, bool paged) {
  return render_helper(flashq_kernel(op, spec), kFlashqHeader, std::string("qattn::decode::flashq::") + type + flashq_args(spec, paged),
                       "qattn::FlashQPackParams", 128, spec.arch);
}

}  // namespace

// The stats writer is the same kernel for a paged cache (it writes no cache blocks), so its name has no
// _paged; lens is one kernel for every cache.
HelperKernel flashq_kernel(const std::string& op, const Spec& spec) {
  if (op == "lens") {
    HelperKernel h;
    h.family = KernelFamily::flashq;
    h.op = op;
    return h;
  }
  HelperKernel h = of_spec(KernelFamily::flashq, spec, op.c_str());
  h.paged = op != "stats" && spec.paged;
  return h;
}

HelperKernel quant_pass_kernel(const QuantRequest& r, const QuantLaunch& l) {
  HelperKernel h;
  h.family = KernelFamily::quant;
  h.in = r.in == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16;
  // int8 storage for int8 and unpacked int4 codes (qmax is a launch parameter); int4: packed.
  h.code.fmt = r.code == Fmt::fp8e4m3 ? Fmt::fp8e4m3 : r.pack4 ? Fmt::int4 : Fmt::int8;
  h.code.gran = r.gran;
  const bool grouped = r.gran == Gran::per_block || r.gran == Gran::per_warp || r.gran == Gran::per_thread;
  h.group = grouped ? r.group : 0;
  h.smooth = r.smooth;
  h.block_mean = r.block_mean;
  h.rotate = r.rotate;
  h.transpose = r.transpose;
  h.head_dim = r.d;
  h.op = l.tag;
  return h;
}

Source render_quant_pass(const QuantRequest& r, const QuantLaunch& l, Arch arch) {
  return render_helper(quant_pass_kernel(r, l), "qattn/quant/quant.cuh", l.pass, "qattn::QuantParams", l.block, arch,
                       static_cast<unsigned>(l.min_blocks));
}

HelperKernel lse_rowdot_kernel(const Spec& spec) { return of_spec(KernelFamily::lse_correction, spec, "rowdot"); }

HelperKernel lse_addscaled_kernel() {
  HelperKernel h;
  h.family = KernelFamily::lse_correction;
  h.op = "addscaled";
  return h;
}

HelperKernel decode_combine_kernel(const Spec& spec) { return of_spec(KernelFamily::decode_combine, spec); }

HelperKernel kv_row_kernel(KernelFamily family, const Spec& spec) {
  HelperKernel h = of_spec(family, spec);
  h.code = spec.qk;
  h.paged = spec.paged;
  return h;
}

Source render_lse_rowdot(const Spec& spec) {
  return render_helper(lse_rowdot_kernel(spec), kLseHeader,
                       std::string("qattn::lse_correction::RowDot<") +
                           (spec.out == Fmt::bf16 ? "qattn::Fmt::bf16" : "qattn::Fmt::fp16") + ", " +
                           std::to_string(spec.head_dim) + ">",
                       "qattn::LseCorrectionParams", 128, spec.arch);
}

Source render_lse_addscaled(Arch arch) {
  return render_helper(lse_addscaled_kernel(), kLseHeader, "qattn::lse_correction::AddScaled", "qattn::LseCorrectionParams", 256, arch);
}

Source render_decode_combine(const Spec& spec) {
  return render_helper(decode_combine_kernel(spec), "qattn/decode/decode_combine.cuh",
                       std::string("qattn::decode::Combine<") + fmt_enum(spec.out) + ", " +
                           std::to_string(spec.head_dim) + ">",
                       "qattn::DecodeCombineParams", 128, spec.arch);
}

namespace {

// A kernel over one cache's rows, templated <cache format, granularity, 16-bit type, d, paged>.
Source kv_row_source(KernelFamily family, const char* header, const char* body, const char* params, const Spec& spec) {
  return render_helper(kv_row_kernel(family, spec), header,
                       std::string(body) + "<" + fmt_enum(spec.qk.fmt) + ", " + gran_enum(spec.qk.gran) + ", " +
                           fmt_enum(spec.out) + ", " + std::to_string(spec.head_dim) + ", " + flag(spec.paged) + ">",
                       params, 128, spec.arch);
}

}  // namespace

// Quantizes new tokens into the cache (kv_layout.h).
Source render_kv_append(const Spec& spec) {
  return kv_row_source(KernelFamily::kv_append, "qattn/decode/kv_append.cuh", "qattn::decode::Append",
                       "qattn::KvAppendParams", spec);
}

// Reads cache rows back as a packed 16-bit tensor (prefill over the cache).
Source render_kv_gather(const Spec& spec) {
  return kv_row_source(KernelFamily::kv_gather, "qattn/decode/kv_gather.cuh", "qattn::decode::Gather",
                       "qattn::KvGatherParams", spec);
}

HelperKernel kv_smooth_kernel(const Spec& spec, const std::string& op) {
  if (op != "mean" && op != "lsefix")
    throw_bad_input("a K smoothing kernel is 'mean' or 'lsefix', not '" + op + "'");
  return of_spec(KernelFamily::kv_smooth, spec, op.c_str());
}

Source render_kv_smooth(const Spec& spec, const std::string& op) {
  const bool mean = op == "mean";
  return render_helper(kv_smooth_kernel(spec, op), "qattn/decode/kv_smooth.cuh",
                       std::string(mean ? "qattn::decode::kv_smooth::Mean<" : "qattn::decode::kv_smooth::LseFix<") +
                           fmt_enum(spec.out) + ", " + std::to_string(spec.head_dim) + ">",
                       "qattn::KvSmoothParams", mean ? 256 : 128, spec.arch);
}

Source render_flashq_stats(const Spec& spec) { return flashq_source("stats", "Stats", spec, false); }
Source render_flashq_prefill(const Spec& spec) { return flashq_source("prefill", "Prefill", spec, true); }
Source render_flashq_append(const Spec& spec) { return flashq_source("append", "Append", spec, true); }
Source render_flashq_lens(const Spec& spec) {
  flashq_args(spec, false);
  return render_helper(flashq_kernel("lens", spec), kFlashqHeader, "qattn::decode::flashq::Lens", "qattn::FlashQPackParams", 128, spec.arch);
}
std::vector<Source> render_flashq_kernels(const Spec& spec) {
  return {render_flashq_stats(spec), render_flashq_prefill(spec), render_flashq_append(spec), render_flashq_lens(spec)};
}

}  // namespace qattn::gen
