// Launch errors of the engine's kernels become exceptions naming the operation.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace skipsoftmax::engine {

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) +
                             ": kernel launch failed: " + cudaGetErrorString(err));
  }
}

}  // namespace skipsoftmax::engine
