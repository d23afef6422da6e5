// GoogleTest fixture for tests that need a GPU: skipped, with the reason, where there is no CUDA driver
// or device (CI, development machines); on a GPU it fails a test that leaves a sticky error behind
// (a kernel fault poisons the context for every later test) or an unbalanced context stack.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "qattn/runtime.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"

namespace qattn::test {

class GpuTest : public ::testing::Test {
 protected:
  static constexpr int kDevice = 0;

  void SetUp() override {
    std::string why;
    if (!rt::driver_available(&why)) GTEST_SKIP() << "no CUDA driver: " << why;
    if (rt::device_count() == 0) GTEST_SKIP() << "the CUDA driver sees no device";
    ASSERT_EQ(rt::driver().cuCtxGetCurrent(&context_at_setup_), CUDA_SUCCESS);
    ready_ = true;
  }

  void TearDown() override {
    if (!ready_) return;
    CUcontext current = nullptr;
    rt::driver().cuCtxGetCurrent(&current);
    EXPECT_EQ(current, context_at_setup_) << "the test left a different context current";
    try {
      rt::synchronize_device(kDevice);
    } catch (const rt::DriverError& e) {
      ADD_FAILURE() << "sticky CUDA error after the test: " << e.what();
    }
  }

 private:
  CUcontext context_at_setup_ = nullptr;
  bool ready_ = false;
};

// A GPU test with an untuned runtime that keeps nothing on disk (the default tilings, compiled in the
// process) and a stream of its own.
class GpuRuntimeTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    RuntimeOptions options;
    options.use_cache = false;
    options.tune = false;
    runtime_.emplace(options);
    stream_.emplace();
  }
  std::optional<Runtime> runtime_;
  std::optional<rt::Stream> stream_;
};

// A GPU test with a fresh scratch folder (for cache files), removed afterwards.
class GpuTestWithDir : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("qattn_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    GpuTest::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

}  // namespace qattn::test
