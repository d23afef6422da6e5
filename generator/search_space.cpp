#include "qattn/search_space.hpp"

#include "qattn/error.hpp"

namespace qattn {
namespace {

// Hand-ordered: the tilings that tuned best on the H100 first, so that default_tiling() is a good
// untuned choice; the rest of the product follows for the tuner to explore.
std::vector<Tiling> preferred(const Spec& s) {
  if (s.head_dim <= 64) return {{128, 128, 4, 2}, {128, 64, 4, 2}, {64, 64, 4, 2}};
  return {{128, 64, 4, 2}, {128, 32, 4, 2}, {64, 64, 4, 2}};
}

void add_unique(std::vector<Tiling>& out, const Tiling& t) {
  for (const Tiling& x : out)
    if (x == t) return;
  out.push_back(t);
}

}  // namespace

std::vector<Tiling> candidate_tilings(const Spec& spec, const DeviceLimits& limits) {
  std::vector<Tiling> all = preferred(spec);
  for (int bm : {64, 128})
    for (int bn : {32, 64, 128})
      for (int w : {4, 8})
        for (int st : {1, 2, 3}) add_unique(all, Tiling{bm, bn, w, st});
  std::vector<Tiling> valid;
  for (const Tiling& t : all)
    if (validate(spec, t, limits)) valid.push_back(t);
  return valid;
}

Tiling default_tiling(const Spec& spec, const DeviceLimits& limits) {
  require(validate(spec));
  const auto c = candidate_tilings(spec, limits);
  if (c.empty()) throw Error(ErrorKind::failure, "no tiling fits " + to_string(spec) + " within the device limits");
  return c.front();
}

std::vector<Spec> default_grid(Arch arch) {
  std::vector<Spec> grid;
  auto add = [&](Operand qk, Operand pv, Fmt out, int d, bool causal, int smooth) {
    Spec s;
    s.qk = qk;
    s.pv = pv;
    s.out = out;
    s.head_dim = d;
    s.causal = causal;
    s.smooth = smooth;
    s.arch = arch;
    grid.push_back(s);
  };
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      for (Fmt f : {Fmt::fp16, Fmt::bf16}) add({f, Gran::none}, {f, Gran::none}, f, d, causal, kSmoothNone);
      for (Gran qg : {Gran::per_token, Gran::per_block, Gran::per_tensor})
        for (Gran vg : {Gran::per_channel, Gran::per_tensor})
          add({Fmt::int8, qg}, {Fmt::int8, vg}, Fmt::fp16, d, causal, kSmoothK);
      add({Fmt::int8, Gran::per_token}, {Fmt::int8, Gran::per_channel}, Fmt::bf16, d, causal, kSmoothK);
    }
  return grid;
}

}  // namespace qattn
