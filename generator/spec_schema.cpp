#include "generator/spec_schema.hpp"

#include <vector>

#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn::gen::schema {
namespace {

template <class E>
constexpr int v(E e) {
  return static_cast<int>(e);
}

// Each enum's values: number, spec-text word, kernel-name code ("" = never written in a name).
constexpr Choice kPhases[] = {{v(Phase::prefill), "prefill", "prefill"},
                              {v(Phase::decode), "decode", "decode"},
                              {v(Phase::linear), "linear", "linear"}};
constexpr Choice kArchs[] = {{v(Arch::sm_80), "sm_80", "sm80"}, {v(Arch::sm_86), "sm_86", "sm86"},
                             {v(Arch::sm_89), "sm_89", "sm89"}, {v(Arch::sm_90), "sm_90", "sm90"},
                             {v(Arch::sm_90a), "sm_90a", "sm90a"}};
constexpr Choice kFmts[] = {{v(Fmt::fp16), "fp16", "f16"}, {v(Fmt::bf16), "bf16", "bf16"},
                            {v(Fmt::int8), "int8", "i8"},  {v(Fmt::int4), "int4", "i4"},
                            {v(Fmt::fp8e4m3), "fp8e4m3", "e4m3"}, {v(Fmt::flashq), "flashq", "fq"}};
constexpr Choice kGrans[] = {{v(Gran::none), "none", ""},
                             {v(Gran::per_tensor), "per_tensor", "ten"},
                             {v(Gran::per_block), "per_block", "blk"},
                             {v(Gran::per_warp), "per_warp", "wrp"},
                             {v(Gran::per_thread), "per_thread", "thr"},
                             {v(Gran::per_token), "per_token", "tok"},
                             {v(Gran::per_channel), "per_channel", "chn"},
                             {v(Gran::per_group), "per_group", "grp"},
                             {v(Gran::per_head), "per_head", "hd"}};
constexpr Choice kSoftmax[] = {{v(SoftmaxMode::exact), "exact", ""},
                               {v(SoftmaxMode::unified_max), "unified_max", "umax"},
                               {v(SoftmaxMode::sas), "sas", "sas"}};
constexpr Choice kAccums[] = {{v(Accum::fp32), "fp32", ""}, {v(Accum::fp16), "fp16", "f16"},
                              {v(Accum::two_level), "two_level", "2lvl"}};
constexpr Choice kRotations[] = {{v(Rotation::none), "none", ""}, {v(Rotation::hadamard), "hadamard", "had"}};
// flow=auto is a request, never a kernel: it renders the mma kernel, so both have no name token.
constexpr Choice kFlows[] = {{v(Dataflow::mma), "mma", ""}, {v(Dataflow::gemv), "gemv", "gemv"},
                             {v(Dataflow::automatic), "auto", ""}, {v(Dataflow::flat), "flat", "flat"},
                             {v(Dataflow::gemm), "gemm", "gemm"}};

constexpr unsigned kAttention = (1u << v(Phase::prefill)) | (1u << v(Phase::decode));
constexpr unsigned kLinear = 1u << v(Phase::linear);
constexpr unsigned kEvery = kAttention | kLinear;

// An operand as one number (fmt, gran); Gran has fewer than 16 values.
int operand_value(const Operand& o) { return v(o.fmt) * 16 + v(o.gran); }
Operand operand_of(int value) { return {static_cast<Fmt>(value / 16), static_cast<Gran>(value % 16)}; }

template <size_t N>
Field choice(const char* key, const char* what, const Choice (&table)[N]) {
  Field f{key, what, Domain::choice};
  f.choices = table;
  f.choice_count = N;
  return f;
}

Field count(const char* key, int lo, int hi) {
  Field f{key, key, Domain::count};
  f.lo = lo;
  f.hi = hi;
  return f;
}

Field with_name(Field f, const char* prefix, int rank, bool required = false) {
  f.name_prefix = prefix;
  f.name_rank = rank;
  f.name_required = required;
  return f;
}

Field of(unsigned phases, Field f) {
  f.phases = phases;
  return f;
}

Field required(Field f, const char* missing) {
  f.required = true;
  f.missing = missing;
  return f;
}

Field make_operand(const char* key) {
  Field f{key, key, Domain::operand};
  f.choices = kFmts;
  f.choice_count = std::size(kFmts);
  return f;
}

#define QATTN_MEMBER(expr, assign) \
  [](const Spec& s) { return static_cast<int>(expr); }, [](Spec& s, int x) { assign; }

// The default of a field is Spec's own member initializer, read back through the accessor.
Field bind(Field f, int (*get)(const Spec&), void (*set)(Spec&, int)) {
  f.get = get;
  f.set = set;
  f.fallback = get(Spec{});
  return f;
}

std::array<Field, kFieldCount> build() {
  Field phase = choice("phase", "phase", kPhases);
  phase.bare = true;
  Field causal{"causal", "causal", Domain::flag};
  Field paged{"paged", "paged", Domain::flag};
  Field varlen{"varlen", "varlen", Domain::flag};
  Field bias{"bias", "bias", Domain::flag};
  // Name ranks order the kernel-name tokens; a rank is unique within each phase (a/qk, w/pv, n/d and
  // bias/causal share one because no spec has both).
  return {{
      of(kEvery, bind(with_name(required(phase, "spec has no phase; start it with prefill, decode or linear"), "", 0, true),
                      QATTN_MEMBER(s.phase, s.phase = static_cast<Phase>(x)))),
      of(kAttention, bind(with_name(required(make_operand("qk"), "spec has no qk=<fmt>[:<gran>] (e.g. qk=int8:per_token or qk=fp16)"),
                                    "qk", 2, true),
                          QATTN_MEMBER(operand_value(s.qk), s.qk = operand_of(x)))),
      of(kAttention, bind(with_name(required(make_operand("pv"), "spec has no pv=<fmt>[:<gran>] (e.g. pv=int8:per_channel or pv=fp16)"),
                                    "pv", 3, true),
                          QATTN_MEMBER(operand_value(s.pv), s.pv = operand_of(x)))),
      of(kLinear, bind(with_name(required(choice("a", "activation format", kFmts), "linear spec has no a=<fp16|bf16>"), "a", 2, true),
                       QATTN_MEMBER(s.act, s.act = static_cast<Fmt>(x)))),
      of(kLinear, bind(with_name(required(make_operand("w"), "linear spec has no w=<fmt>[:<gran>] (e.g. w=fp16, w=int8:per_channel, "
                                                             "w=int4:per_group)"),
                                 "w", 3, true),
                       QATTN_MEMBER(operand_value(s.weight), s.weight = operand_of(x)))),
      of(kEvery, bind(with_name(required(choice("out", "output format", kFmts), "spec has no out=<fp16|bf16>"), "o", 4, true),
                      QATTN_MEMBER(s.out, s.out = static_cast<Fmt>(x)))),
      of(kAttention, bind(with_name(required(count("d", 1, 1024), "spec has no head dimension d=<n> (e.g. d=128)"), "d", 5, true),
                          QATTN_MEMBER(s.head_dim, s.head_dim = x))),
      of(kLinear, bind(with_name(required(count("n", 1, kMaxLinearFeatures), "linear spec has no n=<output features> (e.g. n=4096)"),
                                 "n", 5, true),
                       QATTN_MEMBER(s.n, s.n = x))),
      of(kLinear, bind(with_name(required(count("k", 1, kMaxLinearFeatures), "linear spec has no k=<input features> (e.g. k=4096)"),
                                 "k", 6, true),
                       QATTN_MEMBER(s.k, s.k = x))),
      of(kLinear, bind(with_name(bias, "bias", 7), QATTN_MEMBER(s.bias, s.bias = x != 0))),
      of(kAttention, bind(with_name(causal, "causal", 7), QATTN_MEMBER(s.causal, s.causal = x != 0))),
      of(kAttention, bind(with_name(count("gqa", 1, 256), "gqa", 8), QATTN_MEMBER(s.gqa, s.gqa = x))),
      of(kAttention, bind(with_name(count("splitk", 1, 1024), "sk", 9), QATTN_MEMBER(s.split_k, s.split_k = x))),
      of(kAttention, bind(with_name(choice("softmax", "softmax mode", kSoftmax), "smx", 10),
                          QATTN_MEMBER(s.softmax, s.softmax = static_cast<SoftmaxMode>(x)))),
      of(kAttention, bind(with_name(choice("accum", "accumulation mode", kAccums), "acc", 11),
                          QATTN_MEMBER(s.accum, s.accum = static_cast<Accum>(x)))),
      of(kAttention, bind(with_name(Field{"smooth", "smoothing set", Domain::smooth}, "smooth", 12),
                          QATTN_MEMBER(s.smooth, s.smooth = x))),
      of(kAttention, bind(with_name(choice("rotate", "rotation", kRotations), "rot", 13),
                          QATTN_MEMBER(s.rotate, s.rotate = static_cast<Rotation>(x)))),
      of(kAttention, bind(with_name(paged, "paged", 14), QATTN_MEMBER(s.paged, s.paged = x != 0))),
      of(kAttention, bind(with_name(varlen, "varlen", 16), QATTN_MEMBER(s.varlen, s.varlen = x != 0))),
      of(kEvery, bind(with_name(choice("flow", "dataflow", kFlows), "", 15),
                      QATTN_MEMBER(s.flow, s.flow = static_cast<Dataflow>(x)))),
      of(kEvery, bind(with_name(choice("arch", "arch", kArchs), "", 1, true), QATTN_MEMBER(s.arch, s.arch = static_cast<Arch>(x)))),
  }};
}

#undef QATTN_MEMBER

template <size_t N>
const Choice* find_in(const Choice (&table)[N], int value) {
  for (const Choice& c : table)
    if (c.value == value) return &c;
  return nullptr;
}

template <size_t N>
const char* text_of(const Choice (&table)[N], int value) {
  const Choice* c = find_in(table, value);
  return c ? c->text : "?";
}

std::string accepted_list(const Choice* table, size_t n) {
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(table[i].text);
  return text::join(names, ", ");
}

int lookup_text(const Choice* table, size_t n, std::string_view text, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (text == table[i].text) return table[i].value;
  throw_bad_input(std::string("unknown ") + what + " '" + std::string(text) + "'; accepted: " + accepted_list(table, n));
}

template <size_t N>
bool lookup_code(const Choice (&table)[N], std::string_view code, int& out) {
  for (const Choice& c : table)
    if (*c.code && code == c.code) {
      out = c.value;
      return true;
    }
  return false;
}

Operand parse_operand_text(std::string_view key, std::string_view value) {
  Operand op;
  const auto colon = value.find(':');
  op.fmt = static_cast<Fmt>(lookup_text(kFmts, std::size(kFmts), value.substr(0, colon), "format"));
  const bool is_float = op.fmt == Fmt::fp16 || op.fmt == Fmt::bf16;
  if (colon == std::string_view::npos) {
    if (!is_float)
      throw_bad_input(std::string(key) + "=" + std::string(value) + " needs a scale granularity, e.g. " +
                      std::string(key) + "=" + std::string(value) +
                      ":per_token; accepted: " + accepted_list(kGrans, std::size(kGrans)));
    return op;
  }
  op.gran = static_cast<Gran>(lookup_text(kGrans, std::size(kGrans), value.substr(colon + 1), "granularity"));
  if (is_float && op.gran != Gran::none)
    throw_bad_input(std::string(key) + "=" + std::string(value) + ": fp16/bf16 operands take no granularity");
  return op;
}

bool parse_smooth_letters(std::string_view value, int& bits) {
  bits = 0;
  const char order[] = {'q', 'k', 'v'};
  const int bit[] = {kSmoothQ, kSmoothK, kSmoothV};
  size_t pos = 0;
  for (int i = 0; i < 3 && pos < value.size(); ++i)
    if (value[pos] == order[i]) {
      bits |= bit[i];
      ++pos;
    }
  return pos == value.size() && bits != 0;
}

bool lookup_code_in(const Field& f, std::string_view code, int& out) {
  for (size_t i = 0; i < f.choice_count; ++i)
    if (*f.choices[i].code && code == f.choices[i].code) {
      out = f.choices[i].value;
      return true;
    }
  return false;
}

}  // namespace

bool in_phase(const Field& field, Phase phase) { return (field.phases >> v(phase)) & 1u; }

const std::array<Field, kFieldCount>& fields() {
  static const std::array<Field, kFieldCount> table = build();
  return table;
}

SpecKey spec_key(const Spec& spec) {
  SpecKey key{};
  for (size_t i = 0; i < kFieldCount; ++i) key[i] = fields()[i].get(spec);
  return key;
}

const Choice* find_choice(const Field& field, int value) {
  for (size_t i = 0; i < field.choice_count; ++i)
    if (field.choices[i].value == value) return &field.choices[i];
  return nullptr;
}

const Field& field_named(std::string_view key) {
  for (const Field& f : fields())
    if (key == f.key) return f;
  throw Error(ErrorKind::failure, "no spec field '" + std::string(key) + "'");
}

std::vector<int> domain_values(const Field& f) {
  std::vector<int> out;
  switch (f.domain) {
    case Domain::choice:
      for (size_t i = 0; i < f.choice_count; ++i) out.push_back(f.choices[i].value);
      break;
    case Domain::count: break;
    case Domain::flag: out = {0, 1}; break;
    case Domain::smooth:
      for (int bits = kSmoothNone; bits <= (kSmoothQ | kSmoothK | kSmoothV); ++bits) out.push_back(bits);
      break;
    case Domain::operand:
      for (const Choice& fmt : kFmts) {
        if (fmt.value == v(Fmt::fp16) || fmt.value == v(Fmt::bf16)) {
          out.push_back(operand_value({static_cast<Fmt>(fmt.value), Gran::none}));
          continue;
        }
        for (const Choice& g : kGrans)
          if (g.value != v(Gran::none)) out.push_back(operand_value({static_cast<Fmt>(fmt.value), static_cast<Gran>(g.value)}));
      }
      break;
  }
  return out;
}

std::string accepted_values(const Field& f) { return accepted_list(f.choices, f.choice_count); }

std::string format_value(const Field& f, const Spec& s) {
  const int x = f.get(s);
  switch (f.domain) {
    case Domain::choice: {
      const Choice* c = find_choice(f, x);
      return c ? c->text : "?";
    }
    case Domain::count: return std::to_string(x);
    case Domain::flag: return x ? f.key : "";
    case Domain::operand: {
      const Operand op = operand_of(x);
      std::string t = text_of(kFmts, v(op.fmt));
      if (op.gran != Gran::none) t += std::string(":") + text_of(kGrans, v(op.gran));
      return t;
    }
    case Domain::smooth: return smooth_to_string(x);
  }
  return "";
}

void parse_value(const Field& f, Spec& s, std::string_view value) {
  switch (f.domain) {
    case Domain::choice: f.set(s, lookup_text(f.choices, f.choice_count, value, f.what)); return;
    case Domain::count: {
      long long n = 0;
      if (!text::parse_int(value, n) || n < f.lo || n > f.hi)
        throw_bad_input(std::string(f.key) + "=" + std::string(value) + " is not an integer in [" + std::to_string(f.lo) +
                        ", " + std::to_string(f.hi) + "]");
      f.set(s, static_cast<int>(n));
      return;
    }
    case Domain::flag: f.set(s, 1); return;
    case Domain::operand: f.set(s, operand_value(parse_operand_text(f.key, value))); return;
    case Domain::smooth: {
      int bits = kSmoothNone;
      if (value != "none" && !parse_smooth_letters(value, bits))
        throw_bad_input("smooth=" + std::string(value) +
                        " is not a smoothing set; accepted: none or letters from q, k, v in that order (k, qk, kv, qkv...)");
      f.set(s, bits);
      return;
    }
  }
}

std::string name_token(const Field& f, const Spec& s) {
  const int x = f.get(s);
  if (!f.name_required && x == f.fallback) return "";
  switch (f.domain) {
    case Domain::choice: {
      const Choice* c = find_choice(f, x);
      return c && *c->code ? std::string(f.name_prefix) + c->code : "";
    }
    case Domain::count: return f.name_prefix + std::to_string(x);
    case Domain::flag: return x ? f.name_prefix : "";
    case Domain::operand: return f.name_prefix + operand_code(operand_of(x));
    case Domain::smooth: return f.name_prefix + smooth_to_string(x);
  }
  return "";
}

bool parse_name_token(const Field& f, Spec& s, std::string_view token) {
  if (!text::starts_with(token, f.name_prefix)) return false;
  const std::string_view code = token.substr(std::string_view(f.name_prefix).size());
  switch (f.domain) {
    case Domain::choice: {
      int x = 0;
      if (!lookup_code_in(f, code, x)) return false;
      f.set(s, x);
      return true;
    }
    case Domain::count: {
      long long n = 0;
      if (!text::parse_int(code, n) || n < f.lo || n > f.hi) return false;
      f.set(s, static_cast<int>(n));
      return true;
    }
    case Domain::flag:
      if (!code.empty()) return false;
      f.set(s, 1);
      return true;
    case Domain::operand: {
      Operand op;
      if (!parse_operand_code(code, op)) return false;
      f.set(s, operand_value(op));
      return true;
    }
    case Domain::smooth: {
      int bits = 0;
      if (!parse_smooth_letters(code, bits)) return false;
      f.set(s, bits);
      return true;
    }
  }
  return false;
}

const char* fmt_code(Fmt fmt) {
  const Choice* c = find_in(kFmts, v(fmt));
  return c ? c->code : "";
}

const char* gran_code(Gran gran) {
  const Choice* c = find_in(kGrans, v(gran));
  return c ? c->code : "";
}

bool parse_fmt_code(std::string_view code, Fmt& fmt) {
  int x = 0;
  if (!lookup_code(kFmts, code, x)) return false;
  fmt = static_cast<Fmt>(x);
  return true;
}

bool parse_gran_code(std::string_view code, Gran& gran) {
  int x = 0;
  if (!lookup_code(kGrans, code, x)) return false;
  gran = static_cast<Gran>(x);
  return true;
}

std::string operand_code(const Operand& op) { return std::string(fmt_code(op.fmt)) + gran_code(op.gran); }

bool parse_operand_code(std::string_view s, Operand& op) {
  for (const Choice& f : kFmts) {
    if (!text::starts_with(s, f.code)) continue;
    const std::string_view rest = s.substr(std::string_view(f.code).size());
    op.fmt = static_cast<Fmt>(f.value);
    op.gran = Gran::none;
    if (rest.empty() || parse_gran_code(rest, op.gran)) return true;
  }
  return false;
}

}  // namespace qattn::gen::schema

namespace qattn {

using namespace gen::schema;

const char* to_string(Phase x) { return text_of(kPhases, v(x)); }
const char* to_string(Arch x) { return x == Arch::unset ? "unset" : text_of(kArchs, v(x)); }
const char* to_string(Fmt x) { return text_of(kFmts, v(x)); }
const char* to_string(Gran x) { return text_of(kGrans, v(x)); }
const char* to_string(SoftmaxMode x) { return text_of(kSoftmax, v(x)); }
const char* to_string(Accum x) { return text_of(kAccums, v(x)); }
const char* to_string(Rotation x) { return text_of(kRotations, v(x)); }
const char* to_string(Dataflow x) { return text_of(kFlows, v(x)); }

Arch parse_arch(std::string_view text) {
  return static_cast<Arch>(lookup_text(kArchs, std::size(kArchs), text, "arch"));
}

}  // namespace qattn

namespace qattn::gen::schema {
// A member added to Spec changes its size: add it to the table in build() above, then update this.
static_assert(sizeof(Spec) == 92, "Spec changed: add the new member to the field table (generator/spec_schema.cpp)");
}  // namespace qattn::gen::schema
