// Device memory for the host-side wrappers of the kernels (run_prefill_host, run_decode_host):
// an allocation freed on scope exit, and uploads, with CUDA errors as std::runtime_error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace skipsoftmax::common {

inline void check_cuda(cudaError_t err, const char* who, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": " + what + ": " + cudaGetErrorString(err));
  }
}

// Stands for the device pointers a wrapper has not allocated yet, so that can_implement checks
// the arguments before any GPU work: non-null and 16-byte aligned, never dereferenced.
inline void* unallocated() { return reinterpret_cast<void*>(std::uintptr_t{256}); }

// Throws std::invalid_argument unless the host tensor `what` holds `expected` values.
template <typename T>
void expect_size(const char* who, const char* what, const std::vector<T>& host,
                 std::int64_t expected) {
  if (static_cast<std::int64_t>(host.size()) != expected) {
    throw std::invalid_argument(std::string(who) + ": " + what + " holds " +
                                std::to_string(host.size()) + " values, the arguments give " +
                                std::to_string(expected));
  }
}

class DeviceAllocation {
 public:
  explicit DeviceAllocation(std::size_t bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes ? bytes : 1), "device memory", "cudaMalloc");
  }
  ~DeviceAllocation() { cudaFree(ptr_); }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  void upload(const std::vector<T>& host) const {
    check_cuda(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
               "device memory", "copy to device");
  }

 private:
  void* ptr_ = nullptr;
};

}  // namespace skipsoftmax::common
