// Device memory for the host-side wrappers of the kernels (run_prefill_host, run_decode_host):
// an allocation freed on scope exit, and uploads, with CUDA errors as std::runtime_error.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace skipsoftmax::common {

inline void check_cuda(cudaError_t err, const char* who, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": " + what + ": " + cudaGetErrorString(err));
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
