// Device memory of the engine: owned buffers that count what the engine holds, and CUDA error
// checks that throw.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace skipsoftmax::engine {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("engine: ") + what + ": " + cudaGetErrorString(err));
  }
}

// Bytes held by the buffers that share one counter, now and at most.
struct MemoryCounter {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, MemoryCounter* counter) : bytes_(bytes), counter_(counter) {
    if (bytes == 0) return;
    check_cuda(cudaMalloc(&ptr_, bytes),
               ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
    if (counter_) {
      counter_->current += bytes;
      counter_->peak = std::max(counter_->peak, counter_->current);
    }
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      counter_ = o.counter_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void release() {
    if (!ptr_) return;
    cudaFree(ptr_);
    if (counter_) counter_->current -= bytes_;
    ptr_ = nullptr;
  }

  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryCounter* counter_ = nullptr;
};

// A buffer that grows to the largest size asked for (contents are not kept when it grows).
inline void ensure_bytes(DeviceBuffer& buffer, std::size_t bytes, MemoryCounter* counter) {
  if (buffer.bytes() < bytes) {
    buffer = DeviceBuffer();
    buffer = DeviceBuffer(bytes, counter);
  }
}

template <typename T>
void upload(const std::vector<T>& host, void* device, cudaStream_t stream) {
  check_cuda(
      cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream),
      "copy to the device");
}

template <typename T>
std::vector<T> download(const void* device, std::size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  check_cuda(
      cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
      "copy to the host");
  check_cuda(cudaStreamSynchronize(stream), "stream synchronize");
  return host;
}

}  // namespace skipsoftmax::engine
