#include "runtime/device/device_buffer.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/device/device.hpp"
#include "runtime/device/driver.hpp"
#include "runtime/device/launch_graph.hpp"

namespace qattn::rt {

// With unified addressing the driver finds each pointer's context itself; the guard only makes sure a
// context of the device is current, which every memory call requires.
void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyHtoD, dst, src, bytes);
}
void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyDtoH, dst, src, bytes);
}
void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyDtoD, dst, src, bytes);
}
void copy_to_device_async(CUdeviceptr dst, const void* src, size_t bytes,
    CUstream stream, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyHtoDAsync, dst, src, bytes, stream);
}
void copy_to_host_async(void* dst, CUdeviceptr src, size_t bytes,
    CUstream stream, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyDtoHAsync, dst, src, bytes, stream);
}
void copy_device_to_device_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
    CUstream stream, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemcpyDtoDAsync, dst, src, bytes, stream);
}
void fill_bytes(CUdeviceptr dst, unsigned char value, size_t bytes, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemsetD8, dst, value, bytes);
}
void fill_bytes_async(CUdeviceptr dst, unsigned char value, size_t bytes,
    CUstream stream, int ordinal) {
  if (LaunchRecorder* recorder = active_recorder()) {   // a plan's run being recorded (launch_graph.hpp)
    recorder->memset(dst, value, bytes);
    return;
  }
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemsetD8Async, dst, value, bytes, stream);
}
void fill_words(CUdeviceptr dst, unsigned int value, size_t words, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemsetD32, dst, value, words);
}
void fill_words_async(CUdeviceptr dst, unsigned int value, size_t words,
    CUstream stream, int ordinal) {
  ContextGuard guard(ordinal);
  QATTN_CU(cuMemsetD32Async, dst, value, words, stream);
}

DeviceBuffer::DeviceBuffer(size_t bytes, int ordinal) : bytes_(bytes), ordinal_(ordinal) {
  if (bytes == 0) return;
  ContextGuard guard(ordinal);
  try {
    QATTN_CU(cuMemAlloc, &ptr_, bytes);
  } catch (const DriverError& e) {
    throw DriverError(e.call(), e.code(),
                      "allocating " + std::to_string(bytes) + " bytes on device " +
                          std::to_string(ordinal) + ": " + e.what());
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      ordinal_(other.ordinal_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    ordinal_ = other.ordinal_;
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (ptr_) {
    try {
      ContextGuard guard(ordinal_);
      driver().cuMemFree(ptr_);
    } catch (...) {
      // Destructors must not throw; a context already torn down has freed this memory itself.
    }
  }
  ptr_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::check_range(const char* what, size_t bytes, size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    throw std::out_of_range(std::string("DeviceBuffer::") + what + ": bytes [" +
                            std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                            ") outside a buffer of " + std::to_string(bytes_) + " bytes");
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  check_range("upload", bytes, offset);
  if (bytes) copy_to_device(ptr_ + offset, src, bytes, ordinal_);
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  check_range("download", bytes, offset);
  if (bytes) copy_to_host(dst, ptr_ + offset, bytes, ordinal_);
}

void DeviceBuffer::upload_async(const void* src, size_t bytes, CUstream stream, size_t offset) {
  check_range("upload_async", bytes, offset);
  if (bytes) copy_to_device_async(ptr_ + offset, src, bytes, stream, ordinal_);
}

void DeviceBuffer::download_async(void* dst, size_t bytes, CUstream stream, size_t offset) const {
  check_range("download_async", bytes, offset);
  if (bytes) copy_to_host_async(dst, ptr_ + offset, bytes, stream, ordinal_);
}

void DeviceBuffer::fill(unsigned char value) {
  if (bytes_) fill_bytes(ptr_, value, bytes_, ordinal_);
}

void DeviceBuffer::fill_async(unsigned char value, CUstream stream) {
  if (bytes_) fill_bytes_async(ptr_, value, bytes_, stream, ordinal_);
}

}  // namespace qattn::rt
