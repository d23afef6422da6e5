#include "qattn/kernel_name.hpp"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "generator/spec_schema.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {
namespace {

[[noreturn]] void bad_name(std::string_view name, const std::string& why) {
  throw_bad_input("bad kernel name '" + std::string(name) + "': " + why +
                  "; expected qattn_<prefill|decode>_<arch>_qk<fmt><gran>_pv<fmt><gran>_o<fmt>_d<n>[_<option>...]__<tiling>, "
                  "qattn_linear_<arch>_a<fmt>_w<fmt><gran>_o<fmt>_n<n>_k<n>[_<option>...]__<tiling> "
                  "or a helper kernel qattn_<quant|lsefix|combine|kvappend|kvgather|kvsmooth|flashq>_... (grammar: include/qattn/kernel_name.hpp)");
}

// ---- Helper kernels -------------------------------------------------------------------------------

const std::pair<KernelFamily, const char*> kFamilies[] = {{KernelFamily::quant, "quant"},
                                                          {KernelFamily::lse_correction, "lsefix"},
                                                          {KernelFamily::decode_combine, "combine"},
                                                          {KernelFamily::kv_append, "kvappend"},
                                                          {KernelFamily::kv_gather, "kvgather"},
                                                          {KernelFamily::kv_smooth, "kvsmooth"},
                                                          {KernelFamily::flashq, "flashq"}};
// Quantizer codes: int4 here means packed two per byte (unpacked int4 codes are int8 storage: "i8").
const std::pair<Fmt, const char*> kQuantCodes[] = {{Fmt::int8, "i8"}, {Fmt::int4, "i4p"}, {Fmt::fp8e4m3, "e4m3"}};

const char* family_word(KernelFamily f) {
  for (const auto& [family, word] : kFamilies)
    if (family == f) return word;
  throw_bad_input("attention kernels are named by kernel_name(spec, tiling), not helper_kernel_name");
}

const char* quant_code(Fmt f) {
  for (const auto& [fmt, code] : kQuantCodes)
    if (fmt == f) return code;
  throw_bad_input(std::string("a quantizer writes int8, packed int4 or fp8e4m3 codes, not ") + to_string(f));
}

std::string element(const HelperKernel& h) {
  if (h.in != Fmt::fp16 && h.in != Fmt::bf16)
    throw_bad_input(std::string("helper kernels read fp16 or bf16, not ") + to_string(h.in));
  return gen::schema::fmt_code(h.in);
}

std::string in_and_dim(const HelperKernel& h) { return element(h) + "_d" + std::to_string(h.head_dim); }

bool is_name_text(std::string_view s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return !s.empty();
}

// Reads a helper name's tokens in the order helper_kernel_name writes them; the caller checks that the
// fields print back to the same name.
struct HelperReader {
  std::string_view name;
  const std::vector<std::string>& toks;
  size_t i = 2;

  bool more() const { return i < toks.size(); }
  const std::string& next(const char* what) {
    if (!more()) bad_name(name, std::string("missing ") + what);
    return toks[i++];
  }
  Fmt element() {
    const std::string& t = next("element type");
    Fmt f = Fmt::fp16;
    if (!gen::schema::parse_fmt_code(t, f) || (f != Fmt::fp16 && f != Fmt::bf16))
      bad_name(name, "element type '" + t + "' is not f16 or bf16");
    return f;
  }
  int head_dim() {
    const std::string& t = next("head dim");
    long long d = 0;
    if (!gen::text::starts_with(t, "d") || !gen::text::parse_int(std::string_view(t).substr(1), d) || d < 1 || d > 1024)
      bad_name(name, "bad head-dim token '" + t + "'");
    return static_cast<int>(d);
  }
  bool flag(const char* word) {
    if (more() && toks[i] == word) return ++i, true;
    return false;
  }
};

void read_quant_code(std::string_view name, const std::string& t, HelperKernel& h) {
  for (const auto& [fmt, code] : kQuantCodes) {
    if (!gen::text::starts_with(t, code)) continue;
    std::string_view rest = std::string_view(t).substr(std::string_view(code).size());
    size_t letters = 0;
    while (letters < rest.size() && std::isalpha(static_cast<unsigned char>(rest[letters]))) ++letters;
    Gran g = Gran::none;
    if (!gen::schema::parse_gran_code(rest.substr(0, letters), g)) continue;
    long long group = 0;
    if (letters < rest.size() && !gen::text::parse_int(rest.substr(letters), group)) continue;
    h.code = {fmt, g};
    h.group = static_cast<int>(group);
    return;
  }
  bad_name(name, "bad quantizer code '" + t + "' (i8|i4p|e4m3, then a granularity code and its group)");
}

HelperKernel read_helper(std::string_view name, const std::vector<std::string>& toks, std::string_view op) {
  HelperKernel h;
  bool known = false;
  for (const auto& [family, word] : kFamilies)
    if (toks[1] == word) h.family = family, known = true;
  if (!known) bad_name(name, "unknown kernel family '" + toks[1] + "'");
  HelperReader r{name, toks};
  switch (h.family) {
    case KernelFamily::quant:
      h.in = r.element();
      read_quant_code(name, r.next("quantizer code"), h);
      h.smooth = r.flag("smooth");
      h.block_mean = r.flag("qmean");
      h.rotate = r.flag("rotq") ? 1 : r.flag("rotk") ? 2 : 0;
      h.transpose = r.flag("vt");
      h.head_dim = r.head_dim();
      break;
    case KernelFamily::lse_correction:
    case KernelFamily::flashq:
      if (!r.more()) break;   // one kernel for every head dim
      h.in = r.element();
      h.head_dim = r.head_dim();
      h.paged = h.family == KernelFamily::flashq && r.flag("paged");
      break;
    case KernelFamily::decode_combine:
    case KernelFamily::kv_smooth:
      h.in = r.element();
      h.head_dim = r.head_dim();
      break;
    case KernelFamily::kv_append:
    case KernelFamily::kv_gather: {
      const std::string& cache = r.next("cache operand");
      if (!gen::schema::parse_operand_code(cache, h.code)) bad_name(name, "bad cache operand '" + cache + "'");
      h.in = r.element();
      h.head_dim = r.head_dim();
      h.paged = r.flag("paged");
      break;
    }
    case KernelFamily::attention: break;
  }
  if (r.more()) bad_name(name, "unknown token '" + toks[r.i] + "'");
  h.op = std::string(op);
  return h;
}

// The spec fields in kernel-name order (gen::schema::Field::name_rank).
std::vector<const gen::schema::Field*> fields_in_name_order() {
  std::vector<const gen::schema::Field*> out;
  for (const gen::schema::Field& f : gen::schema::fields()) out.push_back(&f);
  std::stable_sort(out.begin(), out.end(),
                   [](const gen::schema::Field* a, const gen::schema::Field* b) { return a->name_rank < b->name_rank; });
  return out;
}

const std::vector<const gen::schema::Field*>& name_order() {
  static const std::vector<const gen::schema::Field*> order = fields_in_name_order();
  return order;
}

}  // namespace

std::string operand_code(const Operand& op) { return gen::schema::operand_code(op); }

std::string spec_name(const Spec& s) {
  if (s.arch == Arch::unset)
    throw_bad_input("a kernel name needs a concrete arch; set arch=<sm_80|sm_86|sm_89|sm_90|sm_90a>");
  std::string n = "qattn";
  for (const gen::schema::Field* f : name_order()) {
    if (!gen::schema::in_phase(*f, s.phase)) continue;
    const std::string token = gen::schema::name_token(*f, s);
    if (!token.empty()) n += "_" + token;
  }
  return n;
}

bool HelperKernel::operator==(const HelperKernel& o) const {
  return family == o.family && in == o.in && head_dim == o.head_dim && code == o.code && group == o.group &&
         smooth == o.smooth && block_mean == o.block_mean && rotate == o.rotate && transpose == o.transpose &&
         paged == o.paged && op == o.op;
}

std::string helper_kernel_name(const HelperKernel& h) {
  std::string n = std::string("qattn_") + family_word(h.family);
  switch (h.family) {
    case KernelFamily::quant:
      n += "_" + element(h) + "_" + quant_code(h.code.fmt) + gen::schema::gran_code(h.code.gran) +
           (h.group > 0 ? std::to_string(h.group) : "") + (h.smooth ? "_smooth" : "") + (h.block_mean ? "_qmean" : "") +
           (h.rotate == 1 ? "_rotq" : h.rotate == 2 ? "_rotk" : "") + (h.transpose ? "_vt" : "") + "_d" +
           std::to_string(h.head_dim);
      break;
    case KernelFamily::lse_correction:
    case KernelFamily::flashq:
      if (h.head_dim > 0) n += "_" + in_and_dim(h) + (h.paged ? "_paged" : "");
      break;
    case KernelFamily::decode_combine:
    case KernelFamily::kv_smooth: n += "_" + in_and_dim(h); break;
    case KernelFamily::kv_append:
    case KernelFamily::kv_gather:
      n += "_" + gen::schema::operand_code(h.code) + "_" + in_and_dim(h) + (h.paged ? "_paged" : "");
      break;
    case KernelFamily::attention: break;
  }
  const bool has_op = h.family == KernelFamily::quant || h.family == KernelFamily::lse_correction ||
                      h.family == KernelFamily::flashq || h.family == KernelFamily::kv_smooth;
  if (has_op != !h.op.empty() || (has_op && !is_name_text(h.op)))
    throw_bad_input("helper kernel " + n + (has_op ? " needs an op of [A-Za-z0-9_] after '__'" : " takes no op"));
  return has_op ? n + "__" + h.op : n;
}

std::string kernel_name(const Spec& spec, const Tiling& tiling) {
  return spec_name(spec) + "__" + to_string(tiling);
}

ParsedKernelName parse_kernel_name(std::string_view name) {
  const size_t sep = name.find("__");
  const std::vector<std::string> toks = gen::text::split(name.substr(0, sep), "_");
  ParsedKernelName out;
  if (toks.size() >= 2 && toks[0] == "qattn" && toks[1] != "prefill" && toks[1] != "decode" && toks[1] != "linear") {
    out.family = KernelFamily::quant;   // overwritten below
    out.helper = read_helper(name, toks, sep == std::string_view::npos ? std::string_view() : name.substr(sep + 2));
    out.family = out.helper.family;
    std::string again;
    try {
      again = helper_kernel_name(out.helper);
    } catch (const Error& e) {
      bad_name(name, e.what());
    }
    if (again != name) bad_name(name, "not canonical (it prints back as " + again + ")");
    return out;
  }
  if (sep == std::string_view::npos) bad_name(name, "no '__' between spec and tiling");
  out.tiling = parse_tiling(name.substr(sep + 2));
  if (toks.size() < 2 || toks[0] != "qattn") bad_name(name, "too few tokens or no 'qattn' prefix");
  Spec& s = out.spec;
  if (!gen::schema::parse_name_token(gen::schema::fields()[0], s, toks[1])) bad_name(name, "bad phase token '" + toks[1] + "'");
  // The phase says which fields the name has (its positional tokens first).
  std::vector<const gen::schema::Field*> own;
  for (const gen::schema::Field* f : name_order())
    if (gen::schema::in_phase(*f, s.phase) && !f->bare) own.push_back(f);
  size_t positional = 1;
  for (const gen::schema::Field* f : own) positional += f->name_required ? 1 : 0;
  if (toks.size() < positional + 1) bad_name(name, "too few tokens");
  size_t i = 2;
  for (const gen::schema::Field* f : own)
    if (f->name_required && !gen::schema::parse_name_token(*f, s, toks[i++]))
      bad_name(name, std::string("bad ") + f->what + " token '" + toks[i - 1] + "'");
  for (; i < toks.size(); ++i) {
    bool matched = false;
    for (const gen::schema::Field* f : own)
      if (!f->name_required && gen::schema::parse_name_token(*f, s, toks[i])) {
        matched = true;
        break;
      }
    if (!matched) bad_name(name, "unknown token '" + toks[i] + "'");
  }
  if (kernel_name(out.spec, out.tiling) != name) bad_name(name, "not in canonical token order");
  return out;
}

}  // namespace qattn
