// The accuracy gate of the tuner, `qattn run` and benchmark(): which cosine each quantized spec must reach
// on the check's data (rt::min_cosine; the data and the measurements behind each floor are in
// runtime/tuning/gpu_runner.cpp).
#include <gtest/gtest.h>

#include "qattn/spec.hpp"
#include "runtime/tuning/gpu_runner.hpp"

namespace qattn {
namespace {

double floor_of(const char* spec) { return rt::min_cosine(parse_spec(spec)); }

TEST(CheckGate, PerTensorScalesAndInt4HaveLowerFloorsThanTheOtherQuantizedSpecs) {
  EXPECT_EQ(floor_of("prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 smooth=kv"), 0.995);
  EXPECT_EQ(floor_of("prefill qk=int8:per_warp pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv"), 0.995);
  EXPECT_EQ(floor_of("prefill qk=int8:per_block pv=int8:per_channel out=bf16 d=64 causal"), 0.995);
  // One scale for all of Q and K, or for all of V: the main job's per_tensor row scored 0.9946-0.9961.
  EXPECT_EQ(floor_of("prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d=128 causal gqa=4 smooth=k"), 0.99);
  EXPECT_EQ(floor_of("prefill qk=int8:per_tensor pv=int8:per_channel out=fp16 d=64 smooth=kv"), 0.99);
  EXPECT_EQ(floor_of("prefill qk=int8:per_token pv=int8:per_tensor out=fp16 d=64"), 0.99);
  // INT4 Q/K, whatever the granularity.
  EXPECT_EQ(floor_of("prefill qk=int4:per_thread pv=fp8e4m3:per_channel out=fp16 d=128 smooth=kv"), 0.98);
  EXPECT_EQ(floor_of("prefill qk=int4:per_tensor pv=int8:per_tensor out=fp16 d=128"), 0.98);
}

}  // namespace
}  // namespace qattn
