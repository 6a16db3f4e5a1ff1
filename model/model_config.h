// The hyper-parameters of a GGUF checkpoint that the runtime needs, for the two families we run:
// the Llama family (SmolLM2) and Gemma 3 (sliding-window local layers and a few global ones).
#pragma once

#include <string>
#include <vector>

#include "gguf.h"

namespace skipsoftmax {

struct ModelConfig {
  std::string architecture;  // "llama" or "gemma3"
  int layers = 0;
  int hidden = 0;
  int ffn = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int vocab = 0;
  int context_length = 0;
  double rms_eps = 0.0;
  double rope_base = 0.0;         // global layers
  double rope_base_local = 0.0;   // sliding-window layers (Gemma 3)
  int sliding_window = 0;         // keys a local layer sees; 0: no local layers
  std::vector<bool> local_layer;  // [layers]: sliding-window layer (no skip-softmax there)
  double attention_scale = 0.0;   // softmax scale of the scores

  bool is_local(int layer) const { return local_layer[static_cast<std::size_t>(layer)]; }
};

// Throws std::runtime_error naming the missing key or the unsupported architecture.
ModelConfig read_model_config(const gguf::File& file);

}  // namespace skipsoftmax
