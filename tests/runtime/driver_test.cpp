// The dlopen'ed driver on machines with or without a GPU: a missing driver is a clear error, never a
// crash, and compile-only use never needs it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/module.hpp"

namespace qattn::rt {
namespace {

constexpr const char* kNotFound = "CUDA driver not found";

TEST(Driver, MissingLibraryIsAClearError) {
  std::string error;
  EXPECT_EQ(load_driver_library("/nonexistent/libcuda.so.1", &error), nullptr);
  EXPECT_NE(error.find(kNotFound), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/libcuda.so.1"), std::string::npos) << error;
  EXPECT_NE(error.find("compile-only operations still work"), std::string::npos) << error;
}

TEST(Driver, LibraryWithoutDriverSymbolsIsAClearError) {
  std::string error;
  EXPECT_EQ(load_driver_library("libm.so.6", &error), nullptr);
  EXPECT_NE(error.find("lacks cuInit"), std::string::npos) << error;
  // Versioned names are looked up, as cuda.h maps them.
  EXPECT_NE(error.find("cuMemAlloc_v2"), std::string::npos) << error;
  EXPECT_NE(error.find("cuEventElapsedTime_v2"), std::string::npos) << error;
}

// QATTN_LIBCUDA points the process-wide driver elsewhere; the check runs in a fresh process (the
// "threadsafe" death-test style re-executes this binary) because the driver is loaded once per process.
TEST(Driver, OverriddenPathMakesEveryCallFailCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto every_call_fails = [] {
    setenv("QATTN_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    std::string why;
    if (driver_available(&why) || why.find(kNotFound) == std::string::npos) std::exit(1);
    int clean = 0;
    try { device_count(); } catch (const DriverError& e) { clean += std::string(e.what()) == why; }
    try { DeviceBuffer b(64); } catch (const DriverError& e) { clean += std::string(e.what()) == why; }
    try { Stream s; } catch (const DriverError&) { ++clean; }
    try { Module::load(std::vector<unsigned char>(64, 1)); } catch (const DriverError&) { ++clean; }
    std::exit(clean == 4 ? 0 : 2);
  };
  EXPECT_EXIT(every_call_fails(), ::testing::ExitedWithCode(0), "");
}

// Whatever this machine has, the answers agree: either the driver works and counts devices, or every
// query throws the one reason driver_available() gave.
TEST(Driver, AvailabilityAndDeviceCountAgree) {
  std::string why;
  if (driver_available(&why)) {
    EXPECT_TRUE(why.empty());
    EXPECT_GE(device_count(), 0);
    EXPECT_GE(driver_version(), 12000);
    EXPECT_EQ(error_name(CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
  } else {
    EXPECT_FALSE(why.empty());
    try {
      device_count();
      ADD_FAILURE() << "device_count() succeeded without a driver";
    } catch (const DriverError& e) {
      EXPECT_EQ(std::string(e.what()), why);
    }
    EXPECT_EQ(error_name(CUDA_ERROR_INVALID_VALUE), "CUresult 1");
  }
}

TEST(Driver, CheckNamesTheCallAndCode) {
  EXPECT_NO_THROW(check(CUDA_SUCCESS, "cuNothing"));
  try {
    check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
    FAIL() << "no throw";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.call(), "cuMemAlloc");
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cuMemAlloc failed: ", 0), 0u) << what;
    std::string why;
    if (driver_available(&why))
      EXPECT_NE(what.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << what;
    else
      EXPECT_NE(what.find("CUresult 2"), std::string::npos) << what;
  }
}

TEST(Device, ArchForComputeCapability) {
  EXPECT_EQ(arch_for(9, 0), "sm_90a");
  EXPECT_EQ(arch_for(8, 0), "sm_80");
  EXPECT_EQ(arch_for(8, 6), "sm_86");
  EXPECT_EQ(arch_for(8, 7), "sm_86");
  EXPECT_EQ(arch_for(8, 9), "sm_89");
  DeviceInfo h100;
  h100.cc_major = 9;
  EXPECT_EQ(arch_for(h100), "sm_90a");
  EXPECT_THROW(arch_for(7, 5), std::invalid_argument);
  EXPECT_THROW(arch_for(12, 0), std::invalid_argument);
}

}  // namespace
}  // namespace qattn::rt
