// Canonical text form of qattn::Spec (grammar in include/qattn/spec.hpp), driven by the field table of
// generator/spec_schema.hpp.
#include "qattn/spec.hpp"

#include <string>
#include <vector>

#include "generator/spec_schema.hpp"
#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {
namespace {

// "prefill, decode, causal, paged, qk=, pv=, ...": what the spec grammar accepts, in table order.
std::string accepted_tokens(bool bare_words) {
  std::vector<std::string> words, keys;
  for (const gen::schema::Field& f : gen::schema::fields()) {
    if (f.bare)
      for (size_t i = 0; i < f.choice_count; ++i) words.push_back(f.choices[i].text);
    else if (f.domain == gen::schema::Domain::flag)
      words.push_back(f.key);
    else
      keys.push_back(std::string(f.key) + "=");
  }
  if (!bare_words) return gen::text::join(keys, ", ");
  for (const std::string& k : keys) words.push_back(k);
  return gen::text::join(words, ", ");
}

const gen::schema::Field* bare_field_of(const std::string& token) {
  for (const gen::schema::Field& f : gen::schema::fields()) {
    if (f.domain == gen::schema::Domain::flag && token == f.key) return &f;
    if (f.bare)
      for (size_t i = 0; i < f.choice_count; ++i)
        if (token == f.choices[i].text) return &f;
  }
  return nullptr;
}

const gen::schema::Field* keyed_field_of(const std::string& key) {
  for (const gen::schema::Field& f : gen::schema::fields())
    if (!f.bare && f.domain != gen::schema::Domain::flag && key == f.key) return &f;
  return nullptr;
}

// "a=, w=, out=, n=, k=, bias, flow=, arch=": the fields a spec of `phase` takes, in table order.
std::string phase_tokens(Phase phase) {
  std::vector<std::string> out;
  for (const gen::schema::Field& f : gen::schema::fields())
    if (!f.bare && gen::schema::in_phase(f, phase))
      out.push_back(f.domain == gen::schema::Domain::flag ? std::string(f.key) : std::string(f.key) + "=");
  return gen::text::join(out, ", ");
}

}  // namespace

std::string smooth_to_string(int bits) {
  if (bits == kSmoothNone) return "none";
  std::string s;
  if (bits & kSmoothQ) s += 'q';
  if (bits & kSmoothK) s += 'k';
  if (bits & kSmoothV) s += 'v';
  return s;
}

int arch_cc(Arch arch) { return arch == Arch::sm_90a ? 90 : static_cast<int>(arch); }

bool Spec::operator==(const Spec& o) const { return gen::schema::spec_key(*this) == gen::schema::spec_key(o); }

std::string to_string(const Spec& s) {
  std::string out;
  for (const gen::schema::Field& f : gen::schema::fields()) {
    if (!gen::schema::in_phase(f, s.phase)) continue;
    if (!f.required && f.get(s) == f.fallback) continue;
    if (!out.empty()) out += ' ';
    if (f.bare || f.domain == gen::schema::Domain::flag)
      out += gen::schema::format_value(f, s);
    else
      out += std::string(f.key) + "=" + gen::schema::format_value(f, s);
  }
  return out;
}

Spec parse_spec(std::string_view input) {
  Spec s;
  std::vector<const gen::schema::Field*> seen;
  const std::vector<std::string> tokens = gen::text::split_ws(input);
  if (tokens.empty()) throw_bad_input("empty spec; expected e.g. 'prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128'");
  for (const std::string& tok : tokens) {
    const auto eq = tok.find('=');
    const gen::schema::Field* field = nullptr;
    std::string_view value;
    if (eq == std::string::npos) {
      field = bare_field_of(tok);
      if (!field) throw_bad_input("unknown spec token '" + tok + "'; accepted: " + accepted_tokens(true));
      value = tok;
    } else {
      const std::string key = tok.substr(0, eq);
      field = keyed_field_of(key);
      if (!field) throw_bad_input("unknown spec field '" + key + "'; accepted: " + accepted_tokens(false));
      value = std::string_view(tok).substr(eq + 1);
    }
    for (const gen::schema::Field* f : seen)
      if (f == field) {
        if (field->bare) throw_bad_input("spec has two phases; give one of: " + gen::schema::accepted_values(*field));
        throw_bad_input("spec field '" + std::string(field->key) + "' given twice");
      }
    seen.push_back(field);
    gen::schema::parse_value(*field, s, value);
  }
  for (const gen::schema::Field& f : gen::schema::fields()) {
    bool given = false;
    for (const gen::schema::Field* g : seen) given = given || g == &f;
    if (f.bare && !given) throw_bad_input(f.missing);
    if (given && !gen::schema::in_phase(f, s.phase))
      throw_bad_input(std::string(to_string(s.phase)) + " specs take no " + f.key +
                      (f.domain == gen::schema::Domain::flag ? "" : "=") + "; accepted: " + phase_tokens(s.phase));
  }
  for (const gen::schema::Field& f : gen::schema::fields()) {
    if (!f.required || !gen::schema::in_phase(f, s.phase)) continue;
    bool given = false;
    for (const gen::schema::Field* g : seen) given = given || g == &f;
    if (!given) throw_bad_input(f.missing);
  }
  return s;
}

}  // namespace qattn
