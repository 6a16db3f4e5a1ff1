// CUDA errors of the kernels' host calls become exceptions naming the kernel family and the call
// (or, for the engine's operations, the operation).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace skipsoftmax::common {

inline constexpr int kMaxGridYZ = 65535;  // a CUDA grid's y and z extents

// A failed call is reported once: its error is consumed, so that the next call does not read it
// back as its own.
inline void check_launch(cudaError_t err, const char* family, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(family) + ": " + what + ": " + cudaGetErrorString(err));
  }
}

// An error left pending by earlier work would otherwise be read back as the next launch's own.
inline void check_nothing_pending(const char* family) {
  check_launch(cudaGetLastError(), family, "an error pending before the launch");
}

// The engine's device operations: the last launch's error, named by the operation alone.
inline void check_last_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) +
                             ": kernel launch failed: " + cudaGetErrorString(err));
  }
}

}  // namespace skipsoftmax::common
