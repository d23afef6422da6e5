// kernel()'s in-process map key (Runtime::Impl::request_key): specs that differ in any one field, rotate
// included, get different entries. The key once left rotate out, so a rotate=hadamard request could be
// answered with the unrotated kernel already in the map.
#include <gtest/gtest.h>

#include "generator/spec_schema.hpp"
#include "qattn/spec.hpp"
#include "runtime/registry/runtime_impl.hpp"

namespace qattn {
namespace {

TEST(RequestKey, RotationIsPartOfTheKey) {
  const Problem p{1, 8, 8, 4096, 4096};
  const Spec plain = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv arch=sm_90a");
  const Spec rotated = parse_spec("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv rotate=hadamard arch=sm_90a");
  const auto a = Runtime::Impl::request_key(plain, p), b = Runtime::Impl::request_key(rotated, p);
  EXPECT_TRUE(a < b || b < a) << "rotate=hadamard and rotate=none share a map entry";
  EXPECT_FALSE(a < Runtime::Impl::request_key(plain, p) || Runtime::Impl::request_key(plain, p) < a);
}

TEST(RequestKey, EveryFieldIsPartOfTheKey) {
  const Problem p{1, 8, 8, 4096, 4096};
  const Spec base;
  for (const gen::schema::Field& f : gen::schema::fields()) {
    Spec changed = base;
    f.set(changed, f.get(base) == 1 ? 2 : 1);
    ASSERT_NE(changed, base) << f.key;
    const auto a = Runtime::Impl::request_key(base, p), b = Runtime::Impl::request_key(changed, p);
    EXPECT_TRUE(a < b || b < a) << f.key << " is not part of the map key";
  }
}

}  // namespace
}  // namespace qattn
