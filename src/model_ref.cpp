// Placeholder until the CPU reference forward pass lands (it is being written against
// src/model_ref.h): calibration's CPU-forward capture source links against this symbol. The real
// implementation replaces this file whole.
#include "model_ref.h"

#include <stdexcept>

namespace skipsoftmax {

CpuForwardResult cpu_forward(const gguf::File&, const ModelConfig&, std::span<const std::int32_t>,
                             const CpuForwardOptions&) {
  throw std::runtime_error(
      "cpu_forward: the CPU reference forward pass is not in this build yet; feed GPU captures "
      "with --captures-dir instead");
}

}  // namespace skipsoftmax
