// Recording a run (runtime/device/launch_graph.hpp) without a GPU: while a Recording is alive on a
// thread, fill_bytes_async records instead of calling the driver, only on that thread, and nested
// recordings restore the outer one; a recorder reuses its ops across clear(); and a recorded op tells a
// parameter update (same shape) from a rebuild (new shape) and an unchanged node (same parameters).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "runtime/device/device_buffer.hpp"
#include "runtime/device/launch_graph.hpp"

namespace qattn::rt {
namespace {

CUfunction fake_function(std::uintptr_t n) { return reinterpret_cast<CUfunction>(n); }

TEST(LaunchRecorder, RecordsAMemsetInsteadOfEnqueueingItOnTheRecordingThreadOnly) {
  LaunchRecorder recorder;
  EXPECT_EQ(active_recorder(), nullptr);
  {
    Recording recording(recorder);
    EXPECT_EQ(active_recorder(), &recorder);
    fill_bytes_async(0x1000, 0, 512, nullptr, 0);   // no driver here: only a recording can take it
    std::thread([] { EXPECT_EQ(active_recorder(), nullptr); }).join();
    LaunchRecorder inner;
    {
      Recording nested(inner);
      fill_bytes_async(0x2000, 7, 64, nullptr, 0);
    }
    EXPECT_EQ(active_recorder(), &recorder);
    EXPECT_EQ(inner.size(), 1u);
  }
  EXPECT_EQ(active_recorder(), nullptr);
  ASSERT_EQ(recorder.size(), 1u);
  EXPECT_EQ(recorder[0].kind, RecordedOp::Kind::memset);
  EXPECT_EQ(recorder[0].dst, 0x1000u);
  EXPECT_EQ(recorder[0].bytes, 512u);
}

TEST(LaunchRecorder, ANewRecordingStartsEmptyAndReusesTheOps) {
  LaunchRecorder recorder;
  const int a = 1, b = 2;
  {
    Recording recording(recorder);
    recorder.kernel(fake_function(16), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &a, sizeof a);
    recorder.kernel(fake_function(32), Dim3{2, 2, 1}, Dim3{256, 1, 1}, 1024, &b, sizeof b);
  }
  ASSERT_EQ(recorder.size(), 2u);
  {
    Recording recording(recorder);
    recorder.kernel(fake_function(16), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &b, sizeof b);
  }
  ASSERT_EQ(recorder.size(), 1u);
  int held = 0;
  std::memcpy(&held, recorder[0].params.data(), sizeof held);
  EXPECT_EQ(held, b);
  LaunchRecorder copy;
  copy.assign(recorder);
  ASSERT_EQ(copy.size(), 1u);
  EXPECT_TRUE(copy[0].same_params(recorder[0]));
}

TEST(LaunchRecorder, OpsTellAnUpdateFromARebuild) {
  LaunchRecorder r;
  const long long p1 = 10, p2 = 20;
  const int small = 3;
  r.kernel(fake_function(16), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &p1, sizeof p1);    // 0
  r.kernel(fake_function(16), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &p2, sizeof p2);    // 1: new pointer
  r.kernel(fake_function(16), Dim3{8, 1, 1}, Dim3{128, 1, 1}, 0, &p1, sizeof p1);    // 2: new grid
  r.kernel(fake_function(48), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &p1, sizeof p1);    // 3: new kernel
  r.kernel(fake_function(16), Dim3{4, 1, 1}, Dim3{128, 1, 1}, 0, &small, sizeof small);   // 4: new size
  r.memset(0x100, 0, 256);                                                            // 5
  r.memset(0x200, 0, 256);                                                            // 6: new pointer
  r.memset(0x100, 0, 512);                                                            // 7: new width
  EXPECT_TRUE(r[0].same_params(r[0]));
  EXPECT_TRUE(r[1].same_shape(r[0]));
  EXPECT_FALSE(r[1].same_params(r[0]));
  for (size_t i : {2u, 3u, 4u, 5u}) EXPECT_FALSE(r[i].same_shape(r[0])) << i;
  EXPECT_TRUE(r[6].same_shape(r[5]));
  EXPECT_FALSE(r[6].same_params(r[5]));
  EXPECT_FALSE(r[7].same_shape(r[5]));
}

}  // namespace
}  // namespace qattn::rt
