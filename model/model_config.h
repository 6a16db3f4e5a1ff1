// The hyper-parameters of a GGUF checkpoint that the runtime needs, for the two families we run:
// the Llama family (SmolLM2) and Gemma 3 (sliding-window local layers and a few global ones).
#pragma once

#include <string>
#include <string_view>
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

// The attention geometry of a Hugging Face config.json (its text_config where it has one), for
// calibrating Q/K captured from a transformers model: what calibration reads (layers, heads, head
// dim, context, the sliding-window layers and the softmax scale), any model_type. Local layers
// come from layer_types ("sliding_attention"), else sliding_window_pattern (every pattern-th
// layer global), else a sliding_window on every layer (unless use_sliding_window is false); the
// scale is query_pre_attn_scalar^-0.5 where the
// config has it (Gemma), else head_dim^-0.5. The weights' fields (hidden, ffn, vocab, norms,
// rotary bases) stay 0: the forward passes cannot run such a config. Throws std::runtime_error
// naming the key.
ModelConfig read_hf_attention_config(std::string_view json_text, const std::string& context);

}  // namespace skipsoftmax
