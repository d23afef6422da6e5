#include "qattn/kernel_name.hpp"

#include <utility>
#include <vector>

#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {
namespace {

const std::pair<Fmt, const char*> kFmtCodes[] = {
    {Fmt::bf16, "bf16"}, {Fmt::fp16, "f16"}, {Fmt::int8, "i8"}, {Fmt::int4, "i4"}, {Fmt::fp8e4m3, "e4m3"},
    {Fmt::flashq, "fq"}};
const std::pair<Gran, const char*> kGranCodes[] = {
    {Gran::per_tensor, "ten"}, {Gran::per_block, "blk"}, {Gran::per_warp, "wrp"},
    {Gran::per_thread, "thr"}, {Gran::per_token, "tok"}, {Gran::per_channel, "chn"},
    {Gran::per_group, "grp"}, {Gran::per_head, "hd"}};
const std::pair<SoftmaxMode, const char*> kSoftmaxCodes[] = {{SoftmaxMode::unified_max, "umax"},
                                                             {SoftmaxMode::sas, "sas"}};
const std::pair<Accum, const char*> kAccumCodes[] = {{Accum::fp16, "f16"}, {Accum::two_level, "2lvl"}};
const std::pair<Arch, const char*> kArchCodes[] = {{Arch::sm_80, "sm80"}, {Arch::sm_86, "sm86"},
                                                   {Arch::sm_89, "sm89"}, {Arch::sm_90a, "sm90a"},
                                                   {Arch::sm_90, "sm90"}};

template <class E, size_t N>
const char* code_of(const std::pair<E, const char*> (&table)[N], E v) {
  for (const auto& [value, code] : table)
    if (value == v) return code;
  return "";
}

// Matches a whole code (exact) from the table; the order of the table breaks prefix ties.
template <class E, size_t N>
bool match_exact(const std::pair<E, const char*> (&table)[N], std::string_view s, E& out) {
  for (const auto& [value, code] : table)
    if (s == code) {
      out = value;
      return true;
    }
  return false;
}

bool parse_operand_code(std::string_view s, Operand& op) {
  for (const auto& [fmt, code] : kFmtCodes) {
    if (!text::starts_with(s, code)) continue;
    const std::string_view rest = s.substr(std::string_view(code).size());
    op.fmt = fmt;
    if (rest.empty()) {
      op.gran = Gran::none;
      return true;
    }
    if (match_exact(kGranCodes, rest, op.gran)) return true;
  }
  return false;
}

[[noreturn]] void bad_name(std::string_view name, const std::string& why) {
  throw_bad_input("bad kernel name '" + std::string(name) + "': " + why +
                  "; expected qattn_<phase>_<arch>_qk<fmt><gran>_pv<fmt><gran>_o<fmt>_d<n>[_causal][_gqa<n>]"
                  "[_sk<n>][_smx<mode>][_acc<mode>][_smooth<qkv>][_rothad][_paged][_gemv]__bm<n>_bn<n>_w<n>_s<n>");
}

int parse_suffix_int(std::string_view name, std::string_view tok, std::string_view prefix) {
  long long v = 0;
  if (!text::parse_int(tok.substr(prefix.size()), v) || v <= 0 || v > 1 << 20)
    bad_name(name, "token '" + std::string(tok) + "' needs a positive integer after '" + std::string(prefix) + "'");
  return static_cast<int>(v);
}

}  // namespace

std::string operand_code(const Operand& op) {
  return std::string(code_of(kFmtCodes, op.fmt)) + (op.gran == Gran::none ? "" : code_of(kGranCodes, op.gran));
}

std::string spec_name(const Spec& s) {
  if (s.arch == Arch::unset)
    throw_bad_input("a kernel name needs a concrete arch; set arch=<sm_80|sm_86|sm_89|sm_90|sm_90a>");
  std::string n = std::string("qattn_") + to_string(s.phase) + "_" + code_of(kArchCodes, s.arch) + "_qk" +
                  operand_code(s.qk) + "_pv" + operand_code(s.pv) + "_o" + code_of(kFmtCodes, s.out) + "_d" +
                  std::to_string(s.head_dim);
  if (s.causal) n += "_causal";
  if (s.gqa != 1) n += "_gqa" + std::to_string(s.gqa);
  if (s.split_k != 0) n += "_sk" + std::to_string(s.split_k);
  if (s.softmax != SoftmaxMode::exact) n += std::string("_smx") + code_of(kSoftmaxCodes, s.softmax);
  if (s.accum != Accum::fp32) n += std::string("_acc") + code_of(kAccumCodes, s.accum);
  if (s.smooth != kSmoothNone) n += "_smooth" + smooth_to_string(s.smooth);
  if (s.rotate == Rotation::hadamard) n += "_rothad";
  if (s.paged) n += "_paged";
  if (s.flow == Dataflow::gemv) n += "_gemv";
  return n;
}

std::string kernel_name(const Spec& spec, const Tiling& tiling) {
  return spec_name(spec) + "__" + to_string(tiling);
}

ParsedKernelName parse_kernel_name(std::string_view name) {
  const size_t sep = name.find("__");
  if (sep == std::string_view::npos) bad_name(name, "no '__' between spec and tiling");
  ParsedKernelName out;
  out.tiling = parse_tiling(name.substr(sep + 2));
  const std::vector<std::string> toks = text::split(name.substr(0, sep), "_");
  if (toks.size() < 7 || toks[0] != "qattn") bad_name(name, "too few tokens or no 'qattn' prefix");
  Spec& s = out.spec;
  if (toks[1] == "prefill") s.phase = Phase::prefill;
  else if (toks[1] == "decode") s.phase = Phase::decode;
  else bad_name(name, "unknown phase '" + toks[1] + "'");
  if (!match_exact(kArchCodes, toks[2], s.arch)) bad_name(name, "unknown arch '" + toks[2] + "'");
  if (!text::starts_with(toks[3], "qk") || !parse_operand_code(std::string_view(toks[3]).substr(2), s.qk))
    bad_name(name, "bad qk token '" + toks[3] + "'");
  if (!text::starts_with(toks[4], "pv") || !parse_operand_code(std::string_view(toks[4]).substr(2), s.pv))
    bad_name(name, "bad pv token '" + toks[4] + "'");
  Operand out_op;
  if (!text::starts_with(toks[5], "o") || !parse_operand_code(std::string_view(toks[5]).substr(1), out_op) ||
      out_op.gran != Gran::none)
    bad_name(name, "bad output token '" + toks[5] + "'");
  s.out = out_op.fmt;
  if (!text::starts_with(toks[6], "d")) bad_name(name, "bad head-dim token '" + toks[6] + "'");
  s.head_dim = parse_suffix_int(name, toks[6], "d");
  for (size_t i = 7; i < toks.size(); ++i) {
    const std::string_view t = toks[i];
    if (t == "causal") s.causal = true;
    else if (t == "paged") s.paged = true;
    else if (t == "gemv") s.flow = Dataflow::gemv;
    else if (t == "rothad") s.rotate = Rotation::hadamard;
    else if (text::starts_with(t, "gqa")) s.gqa = parse_suffix_int(name, t, "gqa");
    else if (text::starts_with(t, "sk")) s.split_k = parse_suffix_int(name, t, "sk");
    else if (text::starts_with(t, "smx")) {
      if (!match_exact(kSoftmaxCodes, t.substr(3), s.softmax)) bad_name(name, "bad softmax token '" + std::string(t) + "'");
    } else if (text::starts_with(t, "acc")) {
      if (!match_exact(kAccumCodes, t.substr(3), s.accum)) bad_name(name, "bad accum token '" + std::string(t) + "'");
    } else if (text::starts_with(t, "smooth")) {
      s.smooth = parse_spec("prefill qk=fp16 pv=fp16 out=fp16 d=1 smooth=" + std::string(t.substr(6))).smooth;
    } else {
      bad_name(name, "unknown token '" + std::string(t) + "'");
    }
  }
  if (kernel_name(out.spec, out.tiling) != name) bad_name(name, "not in canonical token order");
  return out;
}

}  // namespace qattn
