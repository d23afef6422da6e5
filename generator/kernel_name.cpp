#include "qattn/kernel_name.hpp"

#include <algorithm>
#include <vector>

#include "generator/spec_schema.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {
namespace {

[[noreturn]] void bad_name(std::string_view name, const std::string& why) {
  throw_bad_input("bad kernel name '" + std::string(name) + "': " + why +
                  "; expected qattn_<phase>_<arch>_qk<fmt><gran>_pv<fmt><gran>_o<fmt>_d<n>[_causal][_gqa<n>]"
                  "[_sk<n>][_smx<mode>][_acc<mode>][_smooth<qkv>][_rothad][_paged][_gemv]__bm<n>_bn<n>_w<n>_s<n>");
}

// The spec fields in kernel-name order (schema::Field::name_rank).
std::vector<const schema::Field*> fields_in_name_order() {
  std::vector<const schema::Field*> out;
  for (const schema::Field& f : schema::fields()) out.push_back(&f);
  std::sort(out.begin(), out.end(), [](const schema::Field* a, const schema::Field* b) { return a->name_rank < b->name_rank; });
  return out;
}

const std::vector<const schema::Field*>& name_order() {
  static const std::vector<const schema::Field*> order = fields_in_name_order();
  return order;
}

}  // namespace

std::string operand_code(const Operand& op) { return schema::operand_code(op); }

std::string spec_name(const Spec& s) {
  if (s.arch == Arch::unset)
    throw_bad_input("a kernel name needs a concrete arch; set arch=<sm_80|sm_86|sm_89|sm_90|sm_90a>");
  std::string n = "qattn";
  for (const schema::Field* f : name_order()) {
    const std::string token = schema::name_token(*f, s);
    if (!token.empty()) n += "_" + token;
  }
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
  size_t positional = 0;
  for (const schema::Field* f : name_order()) positional += f->name_required ? 1 : 0;
  if (toks.size() < positional + 1 || toks[0] != "qattn") bad_name(name, "too few tokens or no 'qattn' prefix");
  Spec& s = out.spec;
  size_t i = 1;
  for (const schema::Field* f : name_order())
    if (f->name_required && !schema::parse_name_token(*f, s, toks[i++]))
      bad_name(name, std::string("bad ") + f->what + " token '" + toks[i - 1] + "'");
  for (; i < toks.size(); ++i) {
    bool matched = false;
    for (const schema::Field* f : name_order())
      if (!f->name_required && schema::parse_name_token(*f, s, toks[i])) {
        matched = true;
        break;
      }
    if (!matched) bad_name(name, "unknown token '" + toks[i] + "'");
  }
  if (kernel_name(out.spec, out.tiling) != name) bad_name(name, "not in canonical token order");
  return out;
}

}  // namespace qattn
