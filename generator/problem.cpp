#include "qattn/problem.hpp"

#include "generator/text.hpp"
#include "qattn/error.hpp"

namespace qattn {

std::string to_string(const Problem& p) {
  return "b=" + std::to_string(p.batch) + ",hq=" + std::to_string(p.heads_q) + ",hkv=" + std::to_string(p.heads_kv) +
         ",q=" + std::to_string(p.q_len) + ",kv=" + std::to_string(p.kv_len);
}

Problem parse_problem(std::string_view input) {
  Problem p;
  bool have_kv = false;
  const char* accepted = "; expected comma-separated b=,hq=,hkv=,q=,kv= with positive integers, e.g. b=1,hq=32,hkv=8,q=4096,kv=4096";
  for (const std::string& item : gen::text::split(input, ",")) {
    const auto eq = item.find('=');
    long long v = 0;
    if (eq == std::string::npos || !gen::text::parse_int(std::string_view(item).substr(eq + 1), v) || v < 1 ||
        v > (1 << 24))
      throw_bad_input("bad shape item '" + item + "'" + accepted);
    const std::string key = item.substr(0, eq);
    const int n = static_cast<int>(v);
    if (key == "b") p.batch = n;
    else if (key == "hq") p.heads_q = n;
    else if (key == "hkv") p.heads_kv = n;
    else if (key == "q") p.q_len = n;
    else if (key == "kv") { p.kv_len = n; have_kv = true; }
    else throw_bad_input("unknown shape key '" + key + "'" + accepted);
  }
  if (!have_kv) p.kv_len = p.q_len;
  return p;
}

double attention_flops(const Problem& p, int head_dim, bool causal) {
  const double full = 4.0 * p.batch * p.heads_q * static_cast<double>(p.q_len) * p.kv_len * head_dim;
  return causal ? full / 2 : full;
}

}  // namespace qattn
