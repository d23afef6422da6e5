// Canonical text form of qattn::Spec (grammar in include/qattn/spec.hpp).
#include "qattn/spec.hpp"

#include <sstream>
#include <vector>

#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {
namespace {

template <class E>
struct Named {
  E value;
  const char* text;
};

const Named<Phase> kPhases[] = {{Phase::prefill, "prefill"}, {Phase::decode, "decode"}};
const Named<Arch> kArchs[] = {{Arch::sm_80, "sm_80"}, {Arch::sm_86, "sm_86"}, {Arch::sm_89, "sm_89"},
                              {Arch::sm_90, "sm_90"}, {Arch::sm_90a, "sm_90a"}};
const Named<Fmt> kFmts[] = {{Fmt::fp16, "fp16"}, {Fmt::bf16, "bf16"}, {Fmt::int8, "int8"},
                            {Fmt::int4, "int4"}, {Fmt::fp8e4m3, "fp8e4m3"},
                            {Fmt::flashq, "flashq"}};
const Named<Gran> kGrans[] = {{Gran::none, "none"},           {Gran::per_tensor, "per_tensor"},
                              {Gran::per_block, "per_block"}, {Gran::per_warp, "per_warp"},
                              {Gran::per_thread, "per_thread"}, {Gran::per_token, "per_token"},
                              {Gran::per_channel, "per_channel"}, {Gran::per_group, "per_group"},
                              {Gran::per_head, "per_head"}};
const Named<SoftmaxMode> kSoftmax[] = {{SoftmaxMode::exact, "exact"},
                                       {SoftmaxMode::unified_max, "unified_max"},
                                       {SoftmaxMode::sas, "sas"}};
const Named<Dataflow> kFlows[] = {{Dataflow::mma, "mma"}, {Dataflow::gemv, "gemv"}, {Dataflow::automatic, "auto"}};
const Named<Rotation> kRotations[] = {{Rotation::none, "none"}, {Rotation::hadamard, "hadamard"}};
const Named<Accum> kAccums[] = {{Accum::fp32, "fp32"}, {Accum::fp16, "fp16"}, {Accum::two_level, "two_level"}};

template <class E, size_t N>
const char* name_of(const Named<E> (&table)[N], E value) {
  for (const auto& n : table)
    if (n.value == value) return n.text;
  return "?";
}

template <class E, size_t N>
std::string accepted(const Named<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& n : table) names.push_back(n.text);
  return text::join(names, ", ");
}

template <class E, size_t N>
E value_of(const Named<E> (&table)[N], std::string_view text, const char* what) {
  for (const auto& n : table)
    if (text == n.text) return n.value;
  throw_bad_input(std::string("unknown ") + what + " '" + std::string(text) + "'; accepted: " + accepted(table));
}

int parse_count(std::string_view key, std::string_view value, int lo, int hi) {
  long long v = 0;
  if (!text::parse_int(value, v) || v < lo || v > hi)
    throw_bad_input(std::string(key) + "=" + std::string(value) + " is not an integer in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
  return static_cast<int>(v);
}

Operand parse_operand(std::string_view key, std::string_view value) {
  Operand op;
  const auto colon = value.find(':');
  op.fmt = value_of(kFmts, value.substr(0, colon), "format");
  const bool is_float = op.fmt == Fmt::fp16 || op.fmt == Fmt::bf16;
  if (colon == std::string_view::npos) {
    if (!is_float)
      throw_bad_input(std::string(key) + "=" + std::string(value) + " needs a scale granularity, e.g. " +
                      std::string(key) + "=" + std::string(value) + ":per_token; accepted: " + accepted(kGrans));
    return op;
  }
  op.gran = value_of(kGrans, value.substr(colon + 1), "granularity");
  if (is_float && op.gran != Gran::none)
    throw_bad_input(std::string(key) + "=" + std::string(value) + ": fp16/bf16 operands take no granularity");
  return op;
}

std::string operand_text(const Operand& op) {
  std::string s = to_string(op.fmt);
  if (op.gran != Gran::none) s += std::string(":") + to_string(op.gran);
  return s;
}

int parse_smooth(std::string_view value) {
  if (value == "none") return kSmoothNone;
  int bits = 0;
  const char order[] = {'q', 'k', 'v'};
  const int bit[] = {kSmoothQ, kSmoothK, kSmoothV};
  size_t pos = 0;
  for (int i = 0; i < 3 && pos < value.size(); ++i)
    if (value[pos] == order[i]) {
      bits |= bit[i];
      ++pos;
    }
  if (pos != value.size() || bits == 0)
    throw_bad_input("smooth=" + std::string(value) +
                    " is not a smoothing set; accepted: none or letters from q, k, v in that order (k, qk, kv, qkv...)");
  return bits;
}

}  // namespace

const char* to_string(Phase v) { return name_of(kPhases, v); }
const char* to_string(Arch v) { return v == Arch::unset ? "unset" : name_of(kArchs, v); }
const char* to_string(Fmt v) { return name_of(kFmts, v); }
const char* to_string(Gran v) { return name_of(kGrans, v); }
const char* to_string(SoftmaxMode v) { return name_of(kSoftmax, v); }
const char* to_string(Accum v) { return name_of(kAccums, v); }
const char* to_string(Rotation v) { return name_of(kRotations, v); }
const char* to_string(Dataflow v) { return name_of(kFlows, v); }

std::string smooth_to_string(int bits) {
  if (bits == kSmoothNone) return "none";
  std::string s;
  if (bits & kSmoothQ) s += 'q';
  if (bits & kSmoothK) s += 'k';
  if (bits & kSmoothV) s += 'v';
  return s;
}

Arch parse_arch(std::string_view text) { return value_of(kArchs, text, "arch"); }

int arch_cc(Arch arch) { return arch == Arch::sm_90a ? 90 : static_cast<int>(arch); }

bool Spec::operator==(const Spec& o) const {
  return phase == o.phase && qk == o.qk && pv == o.pv && out == o.out && head_dim == o.head_dim &&
         causal == o.causal && gqa == o.gqa && split_k == o.split_k && softmax == o.softmax &&
         accum == o.accum && smooth == o.smooth && rotate == o.rotate && paged == o.paged && flow == o.flow &&
         arch == o.arch;
}

std::string to_string(const Spec& s) {
  std::ostringstream os;
  os << to_string(s.phase) << " qk=" << operand_text(s.qk) << " pv=" << operand_text(s.pv)
     << " out=" << to_string(s.out) << " d=" << s.head_dim;
  if (s.causal) os << " causal";
  if (s.gqa != 1) os << " gqa=" << s.gqa;
  if (s.split_k != 0) os << " splitk=" << s.split_k;
  if (s.softmax != SoftmaxMode::exact) os << " softmax=" << to_string(s.softmax);
  if (s.accum != Accum::fp32) os << " accum=" << to_string(s.accum);
  if (s.smooth != kSmoothNone) os << " smooth=" << smooth_to_string(s.smooth);
  if (s.rotate != Rotation::none) os << " rotate=" << to_string(s.rotate);
  if (s.paged) os << " paged";
  if (s.flow != Dataflow::automatic) os << " flow=" << to_string(s.flow);
  if (s.arch != Arch::unset) os << " arch=" << to_string(s.arch);
  return os.str();
}

Spec parse_spec(std::string_view input) {
  Spec s;
  bool have_phase = false, have_qk = false, have_pv = false, have_out = false, have_d = false;
  std::vector<std::string> seen;
  const std::vector<std::string> tokens = text::split_ws(input);
  if (tokens.empty()) throw_bad_input("empty spec; expected e.g. 'prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128'");
  for (const std::string& tok : tokens) {
    const auto eq = tok.find('=');
    const std::string key = tok.substr(0, eq);
    for (const auto& k : seen)
      if (k == key) throw_bad_input("spec field '" + key + "' given twice");
    seen.push_back(key);
    if (eq == std::string::npos) {
      if (tok == "prefill" || tok == "decode") {
        if (have_phase) throw_bad_input("spec has two phases; give one of: prefill, decode");
        s.phase = value_of(kPhases, tok, "phase");
        have_phase = true;
        seen.back() = "phase";
      } else if (tok == "causal") {
        s.causal = true;
      } else if (tok == "paged") {
        s.paged = true;
      } else {
        throw_bad_input("unknown spec token '" + tok +
                        "'; accepted: prefill, decode, causal, paged, qk=, pv=, out=, d=, gqa=, splitk=, softmax=, accum=, smooth=, rotate=, flow=, arch=");
      }
      continue;
    }
    const std::string_view value = std::string_view(tok).substr(eq + 1);
    if (key == "qk") {
      s.qk = parse_operand(key, value);
      have_qk = true;
    } else if (key == "pv") {
      s.pv = parse_operand(key, value);
      have_pv = true;
    } else if (key == "out") {
      s.out = value_of(kFmts, value, "output format");
      have_out = true;
    } else if (key == "d") {
      s.head_dim = parse_count(key, value, 1, 1024);
      have_d = true;
    } else if (key == "gqa") {
      s.gqa = parse_count(key, value, 1, 256);
    } else if (key == "splitk") {
      s.split_k = parse_count(key, value, 1, 1024);
    } else if (key == "softmax") {
      s.softmax = value_of(kSoftmax, value, "softmax mode");
    } else if (key == "accum") {
      s.accum = value_of(kAccums, value, "accumulation mode");
    } else if (key == "smooth") {
      s.smooth = parse_smooth(value);
    } else if (key == "rotate") {
      s.rotate = value_of(kRotations, value, "rotation");
    } else if (key == "flow") {
      s.flow = value_of(kFlows, value, "dataflow");
    } else if (key == "arch") {
      s.arch = parse_arch(value);
    } else {
      throw_bad_input("unknown spec field '" + key +
                      "'; accepted: qk=, pv=, out=, d=, gqa=, splitk=, softmax=, accum=, smooth=, rotate=, flow=, arch=");
    }
  }
  if (!have_phase) throw_bad_input("spec has no phase; start it with prefill or decode");
  if (!have_qk) throw_bad_input("spec has no qk=<fmt>[:<gran>] (e.g. qk=int8:per_token or qk=fp16)");
  if (!have_pv) throw_bad_input("spec has no pv=<fmt>[:<gran>] (e.g. pv=int8:per_channel or pv=fp16)");
  if (!have_out) throw_bad_input("spec has no out=<fp16|bf16>");
  if (!have_d) throw_bad_input("spec has no head dimension d=<n> (e.g. d=128)");
  return s;
}

}  // namespace qattn
