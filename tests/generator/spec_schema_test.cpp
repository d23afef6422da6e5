// The one table of Spec fields (generator/spec_schema.hpp): over every value of every field, and a
// sampled cross product, different specs give different map keys, canonical texts and kernel names, and
// every form reads back to the spec it came from.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "generator/spec_schema.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/spec.hpp"

namespace qattn {
namespace {

// Every value each field takes in a spec the grammar accepts (counts: their bounds, default and a few).
std::vector<std::vector<int>> values_per_field() {
  std::vector<std::vector<int>> out;
  for (const gen::schema::Field& f : gen::schema::fields()) {
    std::vector<int> vals;
    switch (f.domain) {
      case gen::schema::Domain::choice:
        for (size_t i = 0; i < f.choice_count; ++i) vals.push_back(f.choices[i].value);
        if (!f.required && gen::schema::find_choice(f, f.fallback) == nullptr) vals.push_back(f.fallback);   // arch unset
        break;
      case gen::schema::Domain::count:
        vals = {f.lo, f.lo + 1, 7, 64, f.hi};
        if (f.fallback < f.lo && !f.required) vals.push_back(f.fallback);   // splitk unset (n and k have no unset)
        break;
      case gen::schema::Domain::flag: vals = {0, 1}; break;
      case gen::schema::Domain::smooth:
        for (int bits = 0; bits < 8; ++bits) vals.push_back(bits);
        break;
      case gen::schema::Domain::operand:
        for (Fmt fmt : {Fmt::fp16, Fmt::bf16, Fmt::int8, Fmt::int4, Fmt::fp8e4m3, Fmt::flashq})
          for (Gran g : {Gran::none, Gran::per_tensor, Gran::per_block, Gran::per_warp, Gran::per_thread,
                         Gran::per_token, Gran::per_channel, Gran::per_group, Gran::per_head}) {
            const bool is_float = fmt == Fmt::fp16 || fmt == Fmt::bf16;
            if (is_float != (g == Gran::none)) continue;   // the grammar: floats take no granularity, others need one
            Spec s;
            s.qk = s.pv = s.weight = {fmt, g};
            vals.push_back(f.get(s));
          }
        break;
    }
    out.push_back(vals);
  }
  return out;
}

// A spec of `phase` with its fields at their defaults (a linear spec's n and k at 1: 0 is not in the grammar).
Spec spec_of_phase(Phase phase) {
  Spec s;
  s.phase = phase;
  if (phase == Phase::linear) s.n = s.k = 1;
  return s;
}

// Specs of every phase; the fields of the other family stay at Spec's defaults (the grammar has no
// token for them).
std::vector<Spec> generated_specs() {
  const auto values = values_per_field();
  const auto& fields = gen::schema::fields();
  std::vector<Spec> specs;
  for (Phase phase : {Phase::prefill, Phase::decode, Phase::linear}) {
    // Every value of every field, the others at their defaults.
    for (size_t i = 1; i < fields.size(); ++i)
      if (gen::schema::in_phase(fields[i], phase))
        for (int v : values[i]) {
          Spec s = spec_of_phase(phase);
          fields[i].set(s, v);
          specs.push_back(s);
        }
    // A sample of the cross product.
    std::mt19937 rng(24 + static_cast<int>(phase));
    for (int n = 0; n < 10000; ++n) {
      Spec s = spec_of_phase(phase);
      for (size_t i = 1; i < fields.size(); ++i)
        if (gen::schema::in_phase(fields[i], phase)) fields[i].set(s, values[i][rng() % values[i].size()]);
      specs.push_back(s);
    }
  }
  return specs;
}

TEST(SpecSchema, EveryFieldIsInTheTableOnce) {
  std::set<std::string> keys;
  std::map<Phase, std::set<int>> ranks;   // a kernel-name position is unique within each phase
  for (const gen::schema::Field& f : gen::schema::fields()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_NE(f.phases, 0u) << f.key;
    for (Phase p : {Phase::prefill, Phase::decode, Phase::linear})
      if (gen::schema::in_phase(f, p)) EXPECT_TRUE(ranks[p].insert(f.name_rank).second) << f.key;
    EXPECT_NE(f.get, nullptr);
    EXPECT_NE(f.set, nullptr);
  }
  // Setting any one field to another value changes the spec, through every member the table names.
  const auto values = values_per_field();
  for (size_t i = 0; i < gen::schema::kFieldCount; ++i) {
    const Spec base;
    for (int v : values[i]) {
      Spec s;
      gen::schema::fields()[i].set(s, v);
      EXPECT_EQ(gen::schema::fields()[i].get(s), v) << gen::schema::fields()[i].key;
      EXPECT_EQ(s == base, v == gen::schema::fields()[i].get(base)) << gen::schema::fields()[i].key << "=" << v;
    }
  }
}

TEST(SpecSchema, DifferentSpecsGiveDifferentKeysTextsAndNames) {
  const std::vector<Spec> specs = generated_specs();
  std::map<gen::schema::SpecKey, std::string> text_of_key;
  std::map<std::string, gen::schema::SpecKey> key_of_text;
  std::map<std::string, gen::schema::SpecKey> key_of_name;
  const Tiling tiling{64, 64, 4, 2};
  size_t named = 0;
  for (const Spec& s : specs) {
    const gen::schema::SpecKey key = gen::schema::spec_key(s);
    const std::string text = to_string(s);
    SCOPED_TRACE(text);
    // parse(to_string(s)) == s, and the canonical text is a fixed point.
    const Spec back = parse_spec(text);
    ASSERT_EQ(back, s);
    ASSERT_EQ(gen::schema::spec_key(back), key);
    ASSERT_EQ(to_string(back), text);
    // One text per key and one key per text.
    const auto [t, fresh_key] = text_of_key.emplace(key, text);
    ASSERT_EQ(t->second, text);
    const auto [k, fresh_text] = key_of_text.emplace(text, key);
    ASSERT_EQ(k->second, key);
    ASSERT_EQ(fresh_key, fresh_text);
    // Kernel names: of specs with a concrete arch. flow=mma names the kernel that flow=auto renders (auto
    // is a request, the name is of the kernel), so its name is flow=auto's and it is left out here.
    if (s.arch == Arch::unset || s.flow == Dataflow::mma) continue;
    const std::string name = kernel_name(s, tiling);
    const ParsedKernelName parsed = parse_kernel_name(name);
    ASSERT_EQ(parsed.spec, s) << name;
    ASSERT_EQ(parsed.tiling, tiling) << name;
    const auto [n, fresh_name] = key_of_name.emplace(name, key);
    ASSERT_EQ(n->second, key) << name << " names two specs";
    ++named;
  }
  EXPECT_GT(text_of_key.size(), 10000u);
  EXPECT_GT(named, 1000u);
}

// The runtime's in-process map is keyed by spec_key: specs that differ only in rotate must not share an
// entry (the key once left rotate out, so rotate=hadamard could get the unrotated kernel).
TEST(SpecSchema, RotationChangesTheKeyAndTheName) {
  const Spec plain = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv arch=sm_90a");
  Spec rotated = plain;
  rotated.rotate = Rotation::hadamard;
  EXPECT_NE(gen::schema::spec_key(plain), gen::schema::spec_key(rotated));
  EXPECT_NE(to_string(plain), to_string(rotated));
  EXPECT_NE(kernel_name(plain, Tiling{}), kernel_name(rotated, Tiling{}));
  // And the same for every field: one changed field, one changed key.
  const Spec base;
  for (const gen::schema::Field& f : gen::schema::fields()) {
    Spec changed = base;
    f.set(changed, f.get(base) == 1 ? 2 : 1);
    if (changed == base) continue;
    EXPECT_NE(gen::schema::spec_key(changed), gen::schema::spec_key(base)) << f.key;
  }
}

}  // namespace
}  // namespace qattn
