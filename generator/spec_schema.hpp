// The one table of qattn::Spec's fields. Everything that lists the fields of a spec goes through it:
// Spec::operator==, the runtime's in-process map key (spec_key), the canonical text (to_string /
// parse_spec, grammar in include/qattn/spec.hpp) and the spec tokens of kernel names (kernel_name.hpp).
// A new Spec member is added here once (and to spec.hpp's grammar comment); the CPU test
// tests/generator/spec_schema_test.cpp fails when a member is left out of the table.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "qattn/spec.hpp"

namespace qattn::gen::schema {

// One value of an enumerated field: its number, its word in the spec text, its code in kernel names
// ("" where kernel names never write it: the field's default, or a value that names the same kernel).
struct Choice {
  int value;
  const char* text;
  const char* code;
};

enum class Domain {
  choice,    // one of `choices`
  count,     // an integer in [lo, hi]
  flag,      // a bare word (`key`), present when true
  operand,   // <fmt>[:<gran>] in text, <fmt code><gran code> in names
  smooth,    // SmoothBits as letters q, k, v
};

struct Field {
  const char* key;        // text: key of key=value, the word of a flag; the phase's values are bare words
  const char* what;       // in error messages: "unknown <what> 'x'"
  Domain domain;
  const Choice* choices = nullptr;   // choice and operand (the formats) domains
  size_t choice_count = 0;
  int lo = 0, hi = 0;                // count domain
  bool bare = false;                 // text: the value alone (the phase), not key=value
  bool required = false;             // text: must be given, always printed
  const char* missing = "";          // error when a required field is not given
  int fallback = 0;                  // the value of a field not given: get(Spec{}), Spec's own default
  const char* name_prefix = "";      // kernel names: a token is name_prefix + the value's code
  int name_rank = 0;                 // position among the kernel-name tokens
  bool name_required = false;        // kernel names: always written (positional)
  unsigned phases = 0;               // bit (1 << Phase) for each phase whose specs have this field
  int (*get)(const Spec&) = nullptr;
  void (*set)(Spec&, int) = nullptr;
};

constexpr size_t kFieldCount = 21;
const std::array<Field, kFieldCount>& fields();   // in canonical text order

// Whether specs of `phase` have the field (an attention spec has no n=, a linear spec no d=). The fields of
// the other family keep Spec's defaults, so they never change the key, the text or the name.
bool in_phase(const Field& field, Phase phase);

// The spec as numbers, one per field: equal exactly when the specs are equal (the map key).
using SpecKey = std::array<int, kFieldCount>;
SpecKey spec_key(const Spec& spec);

// The value tables shared with the enum to_string() functions.
const Choice* find_choice(const Field& field, int value);
const Field& field_named(std::string_view key);

// Text form of one field's value (key=value fields: the part after '='); parse throws bad_input.
std::string format_value(const Field& field, const Spec& spec);
void parse_value(const Field& field, Spec& spec, std::string_view value);
std::string accepted_values(const Field& field);   // "none, hadamard"

// Every value the text grammar can give a field, as the numbers of get() / set(), in table order:
// each choice, both states of a flag, each smoothing set, and each operand (fp16 and bf16 without a
// granularity, the other formats with every granularity; which pairs a kernel supports is validate()'s
// question, not the grammar's). Empty for a count field: its range (lo..hi) is the caller's to sample.
std::vector<int> domain_values(const Field& field);

// Kernel-name form of one field: "" when the name leaves it out; parse returns false on no match.
std::string name_token(const Field& field, const Spec& spec);
bool parse_name_token(const Field& field, Spec& spec, std::string_view token);

// Operand and format codes of kernel names ("i8tok", "f16"), also used by helper kernel names.
std::string operand_code(const Operand& op);
const char* fmt_code(Fmt fmt);
bool parse_operand_code(std::string_view code, Operand& op);
bool parse_fmt_code(std::string_view code, Fmt& fmt);
const char* gran_code(Gran gran);
bool parse_gran_code(std::string_view code, Gran& gran);

}  // namespace qattn::gen::schema
