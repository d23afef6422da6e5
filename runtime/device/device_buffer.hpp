// Device memory: an owning buffer with upload/download helpers, and the raw copies under it.
// Memory belongs to the context ContextGuard picks when it is allocated (see device.hpp).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace qattn::rt {

// Plain copies and fills, issued in the context ContextGuard(ordinal) picks. The *_async ones are
// ordered on `stream` (null: the legacy default stream) and the host memory must stay alive (and, to overlap, be pinned) until the stream reaches them.
void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, int ordinal = 0);
void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, int ordinal = 0);
void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, int ordinal = 0);
void copy_to_device_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream,
                          int ordinal = 0);
void copy_to_host_async(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, int ordinal = 0);
void copy_device_to_device_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream,
                                 int ordinal = 0);
void fill_bytes(CUdeviceptr dst, unsigned char value, size_t bytes, int ordinal = 0);
void fill_bytes_async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream,
                      int ordinal = 0);
// A 4-byte pattern repeated `words` times; dst 4-byte aligned.
void fill_words(CUdeviceptr dst, unsigned int value, size_t words, int ordinal = 0);
void fill_words_async(CUdeviceptr dst, unsigned int value, size_t words, CUstream stream,
                      int ordinal = 0);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, int ordinal = 0);   // uninitialised; 0 bytes holds no memory
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(static_cast<uintptr_t>(ptr_)); }   // for params structs
  size_t size() const { return bytes_; }
  int device() const { return ordinal_; }

  // Byte ranges [offset, offset + bytes) must lie inside the buffer (std::out_of_range otherwise).
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  void upload_async(const void* src, size_t bytes, CUstream stream, size_t offset = 0);
  void download_async(void* dst, size_t bytes, CUstream stream, size_t offset = 0) const;
  void fill(unsigned char value);
  void fill_async(unsigned char value, CUstream stream);

  template <class T>
  static DeviceBuffer from(const std::vector<T>& host, int ordinal = 0) {
    static_assert(std::is_trivially_copyable<T>::value, "device buffers hold plain bytes");
    DeviceBuffer b(host.size() * sizeof(T), ordinal);
    if (!host.empty()) b.upload(host.data(), b.size());
    return b;
  }
  template <class T>
  std::vector<T> to_vector() const {   // the whole buffer as T (size() / sizeof(T) elements)
    static_assert(std::is_trivially_copyable<T>::value, "device buffers hold plain bytes");
    std::vector<T> host(bytes_ / sizeof(T));
    if (!host.empty()) download(host.data(), host.size() * sizeof(T));
    return host;
  }

 private:
  void check_range(const char* what, size_t bytes, size_t offset) const;
  void release() noexcept;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  int ordinal_ = 0;
};

}  // namespace qattn::rt
