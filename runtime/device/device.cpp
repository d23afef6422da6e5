#include "runtime/device/device.hpp"

#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime/device/driver.hpp"

namespace qattn::rt {

int device_count() {
  const DriverApi& api = driver();
  int n = 0;
  CUresult r = api.cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE) return 0;
  check(r, "cuDeviceGetCount");
  return n;
}

CUdevice device_handle(int ordinal) {
  int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    throw DriverError("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE,
                      "no CUDA device " + std::to_string(ordinal) + " (this process sees " +
                          std::to_string(n) + ")");
  CUdevice dev = 0;
  QATTN_CU(cuDeviceGet, &dev, ordinal);
  return dev;
}

int driver_version() {
  int v = 0;
  QATTN_CU(cuDriverGetVersion, &v);
  return v;
}

std::string device_name(int ordinal) {
  char name[256] = {};
  QATTN_CU(cuDeviceGetName, name, static_cast<int>(sizeof(name) - 1), device_handle(ordinal));
  return name;
}

int device_attribute(int ordinal, CUdevice_attribute attribute) {
  int value = 0;
  QATTN_CU(cuDeviceGetAttribute, &value, attribute, device_handle(ordinal));
  return value;
}

DeviceInfo query_device(int ordinal) {
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = device_name(ordinal);
  auto attr = [&](CUdevice_attribute a) { return device_attribute(ordinal, a); };
  d.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  d.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  d.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d.max_smem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  d.max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  d.smem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  d.smem_reserved_per_block = attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  d.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  d.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  d.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  d.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  d.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  d.mem_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  d.mem_bus_width_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  QATTN_CU(cuDeviceTotalMem, &d.total_mem_bytes, device_handle(ordinal));
  d.driver_version = driver_version();
  return d;
}

std::string arch_for(int cc_major, int cc_minor) {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  if (cc_major == 8) {
    if (cc_minor >= 9) return "sm_89";
    if (cc_minor >= 6) return "sm_86";
    return "sm_80";
  }
  throw std::invalid_argument("no qattn kernels for compute capability " + std::to_string(cc_major) +
                              "." + std::to_string(cc_minor) +
                              " (supported: 8.0, 8.6, 8.7, 8.9, 9.0)");
}

std::string arch_for(const DeviceInfo& info) { return arch_for(info.cc_major, info.cc_minor); }

CUcontext primary_context(int ordinal) {
  static std::mutex mutex;
  static std::vector<CUcontext> retained;   // by ordinal; null until first use
  CUdevice dev = device_handle(ordinal);
  std::lock_guard<std::mutex> lock(mutex);
  if (retained.size() <= static_cast<size_t>(ordinal)) retained.resize(ordinal + 1, nullptr);
  if (!retained[ordinal]) QATTN_CU(cuDevicePrimaryCtxRetain, &retained[ordinal], dev);
  return retained[ordinal];
}

ContextGuard::ContextGuard(int ordinal) {
  const DriverApi& api = driver();
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current) {
    CUdevice current_dev = -1;
    // A current context that was destroyed elsewhere reports an error here: treat it as foreign.
    if (api.cuCtxGetDevice(&current_dev) == CUDA_SUCCESS && current_dev == device_handle(ordinal)) {
      context_ = current;
      return;
    }
  }
  context_ = primary_context(ordinal);
  check(api.cuCtxPushCurrent(context_), "cuCtxPushCurrent");
  pushed_ = true;
}

ContextGuard::~ContextGuard() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  driver().cuCtxPopCurrent(&popped);
}

Stream::Stream(int ordinal, bool non_blocking) : ordinal_(ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuStreamCreate, &stream_, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
}

Stream::~Stream() { reset(); }

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), ordinal_(other.ordinal_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
    ordinal_ = other.ordinal_;
  }
  return *this;
}

void Stream::reset() noexcept {
  if (!stream_) return;
  try {
    ContextGuard guard(ordinal_);
    driver().cuStreamDestroy(stream_);
  } catch (...) {
    // Destruction must not throw; a driver that vanished leaves nothing to free.
  }
  stream_ = nullptr;
}

void Stream::synchronize() const { QATTN_CU(cuStreamSynchronize, stream_); }

Event::Event(int ordinal, bool timing) : ordinal_(ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuEventCreate, &event_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
}

Event::~Event() { reset(); }

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), ordinal_(other.ordinal_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = std::exchange(other.event_, nullptr);
    ordinal_ = other.ordinal_;
  }
  return *this;
}

void Event::reset() noexcept {
  if (!event_) return;
  try {
    ContextGuard guard(ordinal_);
    driver().cuEventDestroy(event_);
  } catch (...) {
  }
  event_ = nullptr;
}

void Event::record(CUstream stream) {
  ContextGuard guard(ordinal_);
  QATTN_CU(cuEventRecord, event_, stream);
}

void Event::make_wait(CUstream stream) const {
  ContextGuard guard(ordinal_);
  QATTN_CU(cuStreamWaitEvent, stream, event_, 0);
}

void Event::synchronize() const { QATTN_CU(cuEventSynchronize, event_); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.f;
  QATTN_CU(cuEventElapsedTime, &ms, start.event_, event_);
  return ms;
}

void synchronize_device(int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuCtxSynchronize);
}

MemInfo mem_info(int ordinal) {
  ContextGuard guard(ordinal);
  MemInfo m;
  QATTN_CU(cuMemGetInfo, &m.free_bytes, &m.total_bytes);
  return m;
}

}  // namespace qattn::rt
