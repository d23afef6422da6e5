// Devices, contexts, streams and events on top of the dlopen'ed driver.
//
// Context policy (so qattn lives inside processes that already use the CUDA runtime or PyTorch):
// every operation runs in the context current on the calling thread when that context belongs to the
// device asked for; otherwise in the device's primary context, pushed for the duration of the call.
// Primary contexts are retained once per process and never released, so that qattn never tears down a
// context (and with it every allocation) that the rest of the process shares.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <string>

namespace qattn::rt {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int max_smem_per_block = 0;         // without opt-in (48 KB)
  int max_smem_per_block_optin = 0;   // the most a kernel can ask for with cuFuncSetAttribute
  int smem_per_sm = 0;
  int smem_reserved_per_block = 0;   // taken from smem_per_sm for each resident block
  int max_threads_per_sm = 0;
  int regs_per_block = 0, regs_per_sm = 0;
  int l2_bytes = 0;
  int clock_khz = 0;
  int mem_clock_khz = 0;
  int mem_bus_width_bits = 0;
  size_t total_mem_bytes = 0;
  int driver_version = 0;             // cuDriverGetVersion, e.g. 13000
};

// Number of devices; 0 when the driver reports none. Throws DriverError when there is no driver.
int device_count();
DeviceInfo query_device(int ordinal);
int driver_version();
CUdevice device_handle(int ordinal);
std::string device_name(int ordinal);
int device_attribute(int ordinal, CUdevice_attribute attribute);

// The -arch NVRTC should target: sm_90a for cc 9.0 (wgmma and friends need the "a" variant),
// sm_80 / sm_86 / sm_89 for Ampere and Ada (a cubin runs on later minors of its major).
// Throws std::invalid_argument for compute capabilities qattn has no kernels for.
std::string arch_for(int cc_major, int cc_minor);
std::string arch_for(const DeviceInfo& info);

// The device's primary context, retained on first use and kept for the life of the process.
CUcontext primary_context(int ordinal);

// Makes a context of `ordinal` current for its lifetime: the thread's current one when it belongs to
// that device, else the primary context (pushed now, popped on destruction).
class ContextGuard {
 public:
  explicit ContextGuard(int ordinal = 0);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
  CUcontext context() const { return context_; }
  bool pushed() const { return pushed_; }   // false: an already-current context is being used

 private:
  CUcontext context_ = nullptr;
  bool pushed_ = false;
};

// An owned stream (non-blocking with respect to the legacy default stream unless asked otherwise).
class Stream {
 public:
  explicit Stream(int ordinal = 0, bool non_blocking = true);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  int device() const { return ordinal_; }
  void synchronize() const;

 private:
  void reset() noexcept;
  CUstream stream_ = nullptr;
  int ordinal_ = 0;
};

// An owned event: with timing (the default), or only for ordering work across streams (cheaper to
// record: no timestamp).
class Event {
 public:
  explicit Event(int ordinal = 0, bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream = nullptr);   // null: the legacy default stream
  // Work queued on `stream` after this call waits for the work before the event's last record.
  void make_wait(CUstream stream) const;
  void synchronize() const;
  float elapsed_ms_since(const Event& start) const;   // both recorded and complete

 private:
  void reset() noexcept;
  CUevent event_ = nullptr;
  int ordinal_ = 0;
};

// cuCtxSynchronize in the context ContextGuard picks; throws the sticky error of a failed kernel.
void synchronize_device(int ordinal = 0);

struct MemInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
MemInfo mem_info(int ordinal = 0);

}  // namespace qattn::rt
