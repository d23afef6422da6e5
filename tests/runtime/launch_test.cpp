// On a GPU: compile with NVRTC, load, launch with an AttentionParams argument and read results back.
#include <gtest/gtest.h>

#include <vector>

#include "qattn/abi.h"
#include "runtime/device/device.hpp"
#include "runtime/device/device_buffer.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/module.hpp"
#include "runtime/jit/nvrtc_compiler.hpp"
#include "tests/common/gpu_test.hpp"
#include "tests/runtime/test_kernels.hpp"

namespace qattn::rt {
namespace {

class Launch : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    info_ = query_device(kDevice);
    CompileRequest req;
    req.source = test::abi_kernels_source();
    req.program_name = "abi_kernels.cu";
    req.arch = arch_for(info_);
    compiled_ = compile(req);
    ASSERT_TRUE(compiled_.ok) << compiled_.log;
  }

  // Launches write_pattern over n entries with stride 2 into a buffer pre-filled with a sentinel,
  // on `stream`, and checks every written and every skipped entry.
  void run_write_pattern(const Module& module, CUstream stream) {
    const int n = 1000;
    DeviceBuffer out(sizeof(float) * 2 * n, kDevice);
    fill_words(out.ptr(), 0x7fc00001u, 2 * n, kDevice);   // a NaN the kernel never writes
    AttentionParams p{};
    p.o = TensorRef{out.as<void>(), 0, 0, 2, 1};
    p.batch = 3;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.q_len = n;
    p.kv_len = 77;
    p.softmax_scale = 0.25f;
    Kernel k = module.kernel("write_pattern");
    k.launch(Dim3{(n + 127) / 128}, Dim3{128}, 0, stream, p);
    std::vector<float> host(2 * n);
    out.download_async(host.data(), host.size() * sizeof(float), stream);
    QATTN_CU(cuStreamSynchronize, stream);
    int wrong = 0, touched = 0;
    for (int i = 0; i < n; ++i) {
      wrong += host[2 * i] != test::write_pattern_value(i, 0.25, 3, 2, 77);
      touched += !(host[2 * i + 1] != host[2 * i + 1]);   // the sentinel is NaN: must stay NaN
    }
    EXPECT_EQ(wrong, 0) << "first: " << host[0] << " " << host[2] << " " << host[4];
    EXPECT_EQ(touched, 0);
  }

  DeviceInfo info_;
  CompileResult compiled_;
};

TEST_F(Launch, DeviceInfoIsSane) {
  EXPECT_GE(device_count(), 1);
  EXPECT_FALSE(info_.name.empty());
  EXPECT_GE(info_.cc_major, 8);
  EXPECT_GT(info_.sm_count, 0);
  EXPECT_GT(info_.max_smem_per_block_optin, 100 * 1024);
  EXPECT_GE(info_.smem_per_sm, info_.max_smem_per_block_optin);
  EXPECT_GT(info_.l2_bytes, 0);
  EXPECT_GE(info_.driver_version, 12000);
  EXPECT_GT(info_.total_mem_bytes, size_t{1} << 30);
  const MemInfo m = mem_info(kDevice);
  EXPECT_GT(m.free_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  std::printf("[ device ] %s cc %d.%d, %d SMs, %d KB smem opt-in, %d KB L2, driver %d, arch %s\n",
              info_.name.c_str(), info_.cc_major, info_.cc_minor, info_.sm_count,
              info_.max_smem_per_block_optin / 1024, info_.l2_bytes / 1024, info_.driver_version,
              arch_for(info_).c_str());
}

TEST_F(Launch, WritesAPatternThroughParamsOnACallerStream) {
  Module module = Module::load(compiled_.cubin, kDevice);
  Stream stream(kDevice);
  run_write_pattern(module, stream.get());
}

TEST_F(Launch, RegistersMatchThePtxasReport) {
  Module module = Module::load(compiled_.cubin, kDevice);
  Kernel k = module.kernel("write_pattern");
  int reported = -1;
  for (const KernelUsage& u : compiled_.kernels)
    if (u.name == "write_pattern") reported = u.registers;
  EXPECT_GT(reported, 0) << compiled_.log;
  EXPECT_EQ(k.registers(), reported);
}

TEST_F(Launch, WrongParamSizeAndUnknownKernelAreRejected) {
  Module module = Module::load(compiled_.cubin, kDevice);
  EXPECT_THROW(module.kernel("no_such_kernel"), DriverError);
  if (!driver().cuFuncGetParamInfo) GTEST_SKIP() << "driver older than cuFuncGetParamInfo (12.4)";
  Kernel k = module.kernel("write_pattern");
  EXPECT_EQ(k.param_bytes(), static_cast<long long>(sizeof(AttentionParams)));
  AttentionParams p{};
  EXPECT_THROW(k.launch(Dim3{1}, Dim3{32}, 0, nullptr, &p, sizeof(p) - 8), std::invalid_argument);
}

TEST_F(Launch, DynamicSharedMemoryAbove48KB) {
  const int n = 100 * 1024 / 4;   // floats staged in shared memory: 100 KB
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>((i * 37) % 1001) - 500.0f;
  DeviceBuffer q = DeviceBuffer::from(in, kDevice);
  DeviceBuffer o(sizeof(float) * n, kDevice);
  o.fill(0xff);
  AttentionParams p{};
  p.q = TensorRef{q.as<void>(), 0, 0, 1, 1};
  p.o = TensorRef{o.as<void>(), 0, 0, 1, 1};
  p.kv_len = n;
  p.softmax_scale = 2.0f;
  const unsigned smem = n * sizeof(float);

  Module module = Module::load(compiled_.cubin, kDevice);
  Kernel k = module.kernel("reverse_through_smem");
  // Without the opt-in, the driver refuses more than 48 KB (and the refusal is not sticky).
  EXPECT_THROW(k.launch(Dim3{1}, Dim3{256}, smem, nullptr, p), DriverError);
  k.set_max_dynamic_smem(static_cast<int>(smem));
  EXPECT_EQ(k.max_dynamic_smem(), static_cast<int>(smem));
  Stream stream(kDevice);
  k.launch(Dim3{1}, Dim3{256}, smem, stream.get(), p);
  stream.synchronize();
  const std::vector<float> out = o.to_vector<float>();
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[i] != 2.0 * in[n - 1 - i];
  EXPECT_EQ(wrong, 0);
}

TEST_F(Launch, EventsTimeAKernel) {
  Module module = Module::load(compiled_.cubin, kDevice);
  Stream stream(kDevice);
  Event start(kDevice), stop(kDevice);
  start.record(stream.get());
  run_write_pattern(module, stream.get());
  stop.record(stream.get());
  stop.synchronize();
  const float ms = stop.elapsed_ms_since(start);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 1000.0f);
}

TEST_F(Launch, UsesTheDevicesPrimaryContextWhenNoneIsCurrent) {
  CUcontext current = nullptr;
  ASSERT_EQ(driver().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  ASSERT_EQ(current, nullptr) << "this test assumes a thread without a current context";
  ContextGuard guard(kDevice);
  EXPECT_EQ(guard.context(), primary_context(kDevice));
  EXPECT_TRUE(guard.pushed());
}

// Inside a process that already made its own context current (as a framework might), qattn uses that
// context: memory, module and launch all in it, and the caller's context stays current afterwards.
TEST_F(Launch, WorksInsideAContextTheCallerMadeCurrent) {
  if (!driver().cuCtxCreate || !driver().cuCtxDestroy) GTEST_SKIP() << "driver lacks cuCtxCreate_v4";
  CUcontext own = nullptr;
  CUctxCreateParams params{};
  ASSERT_EQ(driver().cuCtxCreate(&own, &params, 0, device_handle(kDevice)), CUDA_SUCCESS);
  ASSERT_NE(own, primary_context(kDevice));
  {
    ContextGuard guard(kDevice);
    EXPECT_EQ(guard.context(), own);
    EXPECT_FALSE(guard.pushed());
    Module module = Module::load(compiled_.cubin, kDevice);
    Stream stream(kDevice);
    run_write_pattern(module, stream.get());
    // The 48 KB opt-in, set per device, holds in this context too.
    const int n = 64 * 1024 / 4;
    std::vector<float> in(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 997) + 0.5f;
    DeviceBuffer q = DeviceBuffer::from(in, kDevice), o(sizeof(float) * n, kDevice);
    AttentionParams p{};
    p.q = TensorRef{q.as<void>(), 0, 0, 1, 1};
    p.o = TensorRef{o.as<void>(), 0, 0, 1, 1};
    p.kv_len = n;
    p.softmax_scale = -1.0f;
    Kernel k = module.kernel("reverse_through_smem");
    k.set_max_dynamic_smem(n * 4);
    k.launch(Dim3{1}, Dim3{512}, n * 4, stream.get(), p);
    stream.synchronize();
    const std::vector<float> out = o.to_vector<float>();
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += out[i] != -1.0 * in[n - 1 - i];
    EXPECT_EQ(wrong, 0);
    CUcontext current = nullptr;
    driver().cuCtxGetCurrent(&current);
    EXPECT_EQ(current, own);
  }
  CUcontext current = nullptr;
  driver().cuCtxGetCurrent(&current);
  EXPECT_EQ(current, own);
  ASSERT_EQ(driver().cuCtxDestroy(own), CUDA_SUCCESS);
}

}  // namespace
}  // namespace qattn::rt
