// Sample files of `qattn calibrate --inputs F`: magic, header length, JSON header, then raw Q, K, V
// (the layout is documented in include/qattn/calibrate.hpp). Parsing checks the size exactly, so a
// truncated dump or one written with other dimensions is refused instead of read as garbage.
#include <cstring>
#include <nlohmann/json.hpp>

#include "qattn/calibrate.hpp"
#include "qattn/error.hpp"
#include "cache/json_depth.hpp"

namespace qattn {
namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'Q', 'A', 'T', 'T', 'N', 'S', 'M', 'P'};
constexpr size_t kPrefix = 12;                 // magic + uint32 header length
constexpr uint32_t kMaxHeader = 1u << 16;       // a few dozen bytes in practice
constexpr long long kMaxDim = 1LL << 24;       // per dimension; products are checked below

[[noreturn]] void fail(const std::string& message) { throw_bad_input("sample file: " + message); }

int dim_at(const json& h, const char* key, long long hi) {
  const auto it = h.find(key);
  if (it == h.end()) fail(std::string("header field \"") + key + "\" is missing");
  if (!it->is_number_integer()) fail(std::string("header field \"") + key + "\" must be an integer");
  const long long v = it->get<long long>();
  if (v < 1 || v > hi) fail(std::string("header field \"") + key + "\" is " + std::to_string(v) + "; accepted: 1.." + std::to_string(hi));
  return static_cast<int>(v);
}

std::string string_at(const json& h, const char* key) {
  const auto it = h.find(key);
  if (it == h.end() || !it->is_string()) fail(std::string("header field \"") + key + "\" must be a string");
  return it->get<std::string>();
}

// Bytes of a tensor, refusing sizes that overflow or exceed what a file could hold.
size_t tensor_bytes(long long b, long long s, long long h, long long d) {
  const long long limit = 1LL << 46;   // 64 TiB
  long long n = 2;
  for (long long x : {b, s, h, d}) {
    if (n > limit / x) fail("the header's dimensions describe more than 64 TiB");
    n *= x;
  }
  return static_cast<size_t>(n);
}

}  // namespace

SampleFile parse_sample_file(const std::vector<unsigned char>& bytes) {
  if (bytes.size() < kPrefix || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail("does not start with the magic \"QATTNSMP\" (see include/qattn/calibrate.hpp for the format)");
  const uint32_t n = static_cast<uint32_t>(bytes[8]) | static_cast<uint32_t>(bytes[9]) << 8 |
                     static_cast<uint32_t>(bytes[10]) << 16 | static_cast<uint32_t>(bytes[11]) << 24;
  if (n == 0 || n > kMaxHeader || n > bytes.size() - kPrefix)
    fail("header length " + std::to_string(n) + " is out of range for a file of " + std::to_string(bytes.size()) + " bytes");
  json h;
  if (cache::json_too_deep(std::string_view(reinterpret_cast<const char*>(bytes.data()) + kPrefix, n)))
    fail("the header nests arrays/objects deeper than " + std::to_string(cache::kMaxJsonDepth) + " levels");
  try {
    h = json::parse(bytes.begin() + kPrefix, bytes.begin() + kPrefix + n);
  } catch (const json::exception& e) {
    fail(std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!h.is_object()) fail("the header must be a JSON object");
  const auto version = h.find("version");
  if (version == h.end() || !version->is_number_integer() || version->get<long long>() != 1)
    fail("header field \"version\" must be 1");
  SampleFile f;
  const std::string dtype = string_at(h, "dtype");
  if (dtype == "fp16") f.dtype = Fmt::fp16;
  else if (dtype == "bf16") f.dtype = Fmt::bf16;
  else fail("dtype \"" + dtype + "\" is not supported; accepted: fp16, bf16");
  const std::string layout = string_at(h, "layout");
  if (layout != "bshd" && layout != "bhsd") fail("layout \"" + layout + "\" is not supported; accepted: bshd, bhsd");
  f.bhsd = layout == "bhsd";
  f.problem.batch = dim_at(h, "b", kMaxDim);
  f.problem.heads_q = dim_at(h, "hq", 4096);
  f.problem.heads_kv = dim_at(h, "hkv", 4096);
  f.problem.q_len = dim_at(h, "q", kMaxDim);
  f.problem.kv_len = dim_at(h, "kv", kMaxDim);
  f.head_dim = dim_at(h, "d", 1024);
  if (f.problem.heads_q % f.problem.heads_kv != 0)
    fail("hq=" + std::to_string(f.problem.heads_q) + " is not a multiple of hkv=" + std::to_string(f.problem.heads_kv));
  f.q_bytes = tensor_bytes(f.problem.batch, f.problem.q_len, f.problem.heads_q, f.head_dim);
  f.kv_bytes = tensor_bytes(f.problem.batch, f.problem.kv_len, f.problem.heads_kv, f.head_dim);
  f.q_offset = kPrefix + n;
  f.k_offset = f.q_offset + f.q_bytes;
  f.v_offset = f.k_offset + f.kv_bytes;
  const size_t want = f.v_offset + f.kv_bytes;
  if (bytes.size() != want)
    fail("holds " + std::to_string(bytes.size()) + " bytes; its header describes " + std::to_string(want) +
         " (header + Q + K + V at 2 bytes per element)");
  return f;
}

std::vector<unsigned char> encode_sample_file(const SampleFile& f, const std::vector<std::uint16_t>& q,
                                              const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v) {
  const Problem& p = f.problem;
  const json h = {{"version", 1},         {"dtype", to_string(f.dtype)}, {"layout", f.bhsd ? "bhsd" : "bshd"},
                  {"b", p.batch},         {"hq", p.heads_q},             {"hkv", p.heads_kv},
                  {"q", p.q_len},         {"kv", p.kv_len},              {"d", f.head_dim}};
  const std::string header = h.dump();
  const size_t nq = tensor_bytes(p.batch, p.q_len, p.heads_q, f.head_dim) / 2;
  const size_t nkv = tensor_bytes(p.batch, p.kv_len, p.heads_kv, f.head_dim) / 2;
  if (q.size() != nq || k.size() != nkv || v.size() != nkv)
    throw_bad_input("encode_sample_file: tensor sizes do not match the header");
  std::vector<unsigned char> out(kMagic, kMagic + sizeof kMagic);
  const uint32_t n = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const auto* t : {&q, &k, &v})
    for (std::uint16_t x : *t) {   // little-endian whatever the host order
      out.push_back(static_cast<unsigned char>(x & 0xff));
      out.push_back(static_cast<unsigned char>(x >> 8));
    }
  return out;
}

}  // namespace qattn
