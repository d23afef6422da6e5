#include "generator/spec_space.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "generator/render.hpp"
#include "generator/spec_schema.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/validate.hpp"

namespace qattn::gen {
namespace {

// The values the enumeration gives a count field (spec_space.hpp says why these).
std::vector<int> count_values(const schema::Field& f) {
  if (std::strcmp(f.key, "gqa") == 0) return {1, 2, 4, 8, 16};
  if (std::strcmp(f.key, "splitk") == 0) return {f.fallback};
  if (std::strcmp(f.key, "n") == 0 || std::strcmp(f.key, "k") == 0) return {4096};   // one layer shape
  std::vector<int> all;   // d: the whole range; validate() keeps the head dims it accepts
  for (int x = f.lo; x <= f.hi; ++x) all.push_back(x);
  return all;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string kernel_code(const Spec& spec, const Tiling& tiling) {
  const Source src = render_kernel(spec, tiling);
  std::string code = src.text.substr(src.text.find('\n') + 1);
  for (size_t at = code.find(src.kernel_name); at != std::string::npos; at = code.find(src.kernel_name, at))
    code.replace(at, src.kernel_name.size(), "K");
  for (const std::string& o : src.options) code += "\n" + o;
  return code + "\n" + to_string(src.arch);
}

std::vector<Spec> accepted_specs(Phase phase, Arch arch) {
  const auto& fields = schema::fields();
  size_t first_checked = 0;   // validate() from the field `out` on: the format fields make a kernel family
  while (std::strcmp(fields[first_checked].key, "out") != 0) ++first_checked;
  std::vector<std::vector<int>> values(fields.size());
  for (size_t i = 0; i < fields.size(); ++i)
    values[i] = fields[i].domain == schema::Domain::count ? count_values(fields[i]) : schema::domain_values(fields[i]);
  Spec spec;
  spec.phase = phase;
  spec.arch = arch;
  if (phase == Phase::linear) spec.n = spec.k = 4096;   // a layer shape validate() accepts from the start
  std::vector<Spec> out;
  std::function<void(size_t)> walk = [&](size_t i) {
    if (i == fields.size()) {
      out.push_back(spec);
      return;
    }
    const schema::Field& f = fields[i];
    // Fixed by the caller, or at Spec's default where the phase has no such field.
    if (std::strcmp(f.key, "phase") == 0 || std::strcmp(f.key, "arch") == 0 || !schema::in_phase(f, phase)) {
      if (i < first_checked || validate(spec)) walk(i + 1);
      return;
    }
    const int entry = f.get(spec);
    for (int x : values[i]) {
      f.set(spec, x);
      if (i < first_checked || validate(spec)) walk(i + 1);
    }
    f.set(spec, entry);
  };
  walk(0);
  return out;
}

std::vector<SpacePoint> distinct_default_kernels(const std::vector<Spec>& specs) {
  std::vector<SpacePoint> out;
  std::unordered_set<std::string> seen;
  for (const Spec& s : specs) {
    if (s.phase == Phase::linear && s.flow == Dataflow::automatic) continue;   // a request: its kernels are the flows'
    const Tiling t = default_tiling(s, default_limits(s.arch));
    if (seen.insert(kernel_code(s, t)).second) out.push_back({s, t, kernel_name(s, t)});
  }
  return out;
}

std::vector<SpacePoint> sample_points(const std::vector<SpacePoint>& points, size_t count, uint64_t seed) {
  if (count >= points.size()) return points;
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i)   // the first `count` steps of a Fisher-Yates shuffle
    std::swap(order[i], order[i + splitmix64(state) % (order.size() - i)]);
  order.resize(count);
  std::sort(order.begin(), order.end());
  std::vector<SpacePoint> out;
  for (size_t i : order) out.push_back(points[i]);
  return out;
}

}  // namespace qattn::gen
