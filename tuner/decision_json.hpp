// Reading and writing the tuner's decisions as JSON (decode_decisions_json.cpp, linear_decisions_json.cpp):
// field access whose errors say where ("decode_dataflow JSON: buckets[1].rows[0] ..."), and the header
// every decision carries (format, version, family key).
#pragma once
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cache/json_depth.hpp"
#include "qattn/error.hpp"
#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

namespace qattn::decision_json {

using nlohmann::json;

constexpr int kFormatVersion = 1;

inline json time_json(double us) { return std::isfinite(us) && us > 0 ? json(us) : json(nullptr); }

// Field access with errors that say where ("decode_dataflow JSON: buckets[1].rows[0] ...").
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& message) const {
    throw_bad_input(what_ + " JSON: " + (where.empty() ? "" : where + " ") + message);
  }
  static std::string at(const std::string& where, const std::string& key) { return where.empty() ? key : where + "." + key; }
  static std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

  const json& member(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object()) fail(where, "must be an object");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(at(where, key), "is missing");
    return *it;
  }
  const json& array(const json& v, const std::string& where) const {
    if (!v.is_array()) fail(where, "must be an array");
    return v;
  }
  long long integer(const json& v, const std::string& where, long long lo, long long hi) const {
    if (!v.is_number_integer()) fail(where, "must be an integer");
    const long long n = v.get<long long>();
    if (n < lo || n > hi) fail(where, "is " + std::to_string(n) + "; accepted: " + std::to_string(lo) + ".." + std::to_string(hi));
    return n;
  }
  long long power_of_two(const json& v, const std::string& where, long long hi) const {
    const long long n = integer(v, where, 1, hi);
    if (n & (n - 1)) fail(where, "is " + std::to_string(n) + "; accepted: a power of two");
    return n;
  }
  double number(const json& v, const std::string& where, double lo, double hi) const {
    if (!v.is_number()) fail(where, "must be a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) fail(where, "is " + v.dump() + "; accepted: " + json(lo).dump() + ".." + json(hi).dump());
    return x;
  }
  double time(const json& v, const std::string& where) const {
    if (v.is_null()) return NAN;
    if (!v.is_number() || !(v.get<double>() > 0)) fail(where, "must be a time > 0 in microseconds, or null for a failed run");
    return v.get<double>();
  }
  std::string text(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "must be a string");
    return v.get<std::string>();
  }
  // One of `accepted` by its spec text ("mma", "gemv", "flat", ...).
  Dataflow flow(const json& v, const std::string& where, std::initializer_list<Dataflow> accepted) const {
    const std::string f = text(v, where);
    std::string list;
    for (Dataflow d : accepted) {
      if (f == to_string(d)) return d;
      list += (list.empty() ? "" : ", ") + std::string(to_string(d));
    }
    fail(where, "is '" + f + "'; accepted: " + list);
  }
  Tiling tiling(const json& v, const std::string& where) const {
    const std::string t = text(v, where);
    try {
      return parse_tiling(t);
    } catch (const Error& e) {
      fail(where, std::string("is not a tiling: ") + e.what());
    }
  }
  // The header every decision carries: format, version and the family key, which must be the canonical
  // key (family_key of its spec) of a `kind` spec ("decode", "linear"); key_rule says what that key is.
  std::string header(const json& j, const char* format, std::string (*family_key)(const Spec&), const char* kind,
                     const char* key_rule) const {
    if (!j.is_object()) fail("", "must be an object");
    if (text(member(j, "", "format"), "format") != format) fail("format", std::string("must be \"") + format + "\"");
    const long long version = integer(member(j, "", "version"), "version", 0, 1LL << 30);
    if (version != kFormatVersion)
      fail("version", "is " + std::to_string(version) + "; accepted: " + std::to_string(kFormatVersion));
    const std::string family = text(member(j, "", "family"), "family");
    std::string canonical;
    try {
      canonical = family_key(parse_spec(family));
    } catch (const Error& e) {
      fail("family", std::string("is not a ") + kind + " spec: " + e.what());
    }
    if (canonical != family)
      fail("family", "'" + family + "' must be the canonical " + key_rule + " ('" + canonical + "')");
    return family;
  }

 private:
  std::string what_;
};

template <class T>
inline T parse_text(std::string_view text, const char* what) {
  json j;
  if (cache::json_too_deep(text)) throw_bad_input(cache::json_too_deep_message(std::string(what) + " JSON"));
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {   // parse_error, and out_of_range for a number such as 1e400
    throw_bad_input(std::string(what) + " JSON: not valid JSON (" + e.what() + ")");
  }
  return j.get<T>();
}

}  // namespace qattn::decision_json
