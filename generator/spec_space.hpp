// The spec space validate() accepts, enumerated from the field table (spec_schema.hpp), reduced to the
// distinct kernels of its default tilings, and a seeded sample of it: what `qattn compile --grid space`
// (the full spill sweep) and the CPU test tests/runtime/spill_sample_test.cpp compile.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qattn/spec.hpp"
#include "qattn/tiling.hpp"

namespace qattn::gen {

// Every spec of `phase` on `arch` that validate() accepts, in field-table order (deterministic).
// Choice, flag, smoothing and operand fields take every value of their domain (schema::domain_values);
// the count fields take the values the kernels can tell apart:
//   d       every head dim in the field's range that validate() accepts;
//   gqa     1, 2, 4, 8 and 16: the kernels see it only through the GEMV decode tiling's rows per CTA,
//           the smallest power of two >= gqa, at most 8 (search_space.cpp, preferred_gemv);
//   splitk  unset only: the split count is a launch argument, never part of a kernel;
//   n, k    (linear) 4096 only: one layer shape, the kernels' other shapes differ in constants only.
// The search prunes a partial spec (the fields after `out` still at their defaults) as soon as
// validate() refuses it. That is exact because every such field's default is accepted wherever any of
// its values is (fp32 accumulation, no smoothing, no rotation, exact softmax, gqa 1, not paged,
// flow=auto); tests/generator/spec_space_test.cpp checks the claim against an unpruned product.
std::vector<Spec> accepted_specs(Phase phase, Arch arch);

// One kernel of the space: a spec, its default tiling and the kernel's name.
struct SpacePoint {
  Spec spec;
  Tiling tiling;
  std::string kernel;
};

// What compiles for (spec, tiling): the translation unit without its comment line and with the kernel's
// name replaced, plus the compile options and arch. Equal for specs that share a binary.
std::string kernel_code(const Spec& spec, const Tiling& tiling);

// The default-tiling kernels of `specs`, one point per distinct kernel (the first spec that renders it):
// specs whose translation units differ only in the kernel's name and its comment line (e.g. qk
// granularities that share a kernel, gqa and rotation in prefill, which only the quantization passes
// see) compile to the same binary. In the order of `specs`.
std::vector<SpacePoint> distinct_default_kernels(const std::vector<Spec>& specs);

// `count` points drawn from `points` without replacement, seeded: the same draw on every platform and
// standard library (a splitmix64 stream, no std distributions). In the order of `points`; all of them
// when count >= points.size().
std::vector<SpacePoint> sample_points(const std::vector<SpacePoint>& points, size_t count, uint64_t seed);

}  // namespace qattn::gen
