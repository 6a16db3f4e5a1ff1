#include "model_config.h"

#include <cmath>
#include <stdexcept>

namespace skipsoftmax {
namespace {

int to_int(std::int64_t v, const std::string& key) {
  if (v <= 0 || v > (std::int64_t{1} << 30)) {
    throw std::runtime_error(key + " = " + std::to_string(v) + " is out of range");
  }
  return static_cast<int>(v);
}

}  // namespace

ModelConfig read_model_config(const gguf::File& f) {
  ModelConfig c;
  c.architecture = f.string("general.architecture");
  const std::string& a = c.architecture;
  if (a != "llama" && a != "gemma3") {
    throw std::runtime_error("architecture '" + a + "' is not supported (llama, gemma3)");
  }
  const auto get = [&](const std::string& key) {
    return to_int(f.integer(a + "." + key), a + "." + key);
  };
  c.layers = get("block_count");
  c.hidden = get("embedding_length");
  c.ffn = get("feed_forward_length");
  c.heads_q = get("attention.head_count");
  c.heads_kv = get("attention.head_count_kv");
  c.context_length = get("context_length");
  c.rms_eps = f.number(a + ".attention.layer_norm_rms_epsilon");
  if (!(std::isfinite(c.rms_eps) && c.rms_eps > 0.0 && c.rms_eps < 1.0)) {
    throw std::runtime_error(a + ".attention.layer_norm_rms_epsilon = " +
                             std::to_string(c.rms_eps) + " must lie in (0, 1)");
  }
  c.rope_base = f.number(a + ".rope.freq_base");
  if (!(std::isfinite(c.rope_base) && c.rope_base > 1.0)) {
    throw std::runtime_error(a + ".rope.freq_base = " + std::to_string(c.rope_base) +
                             " must be a finite number above 1");
  }
  c.vocab = static_cast<int>(f.strings("tokenizer.ggml.tokens").size());
  if (c.vocab == 0) throw std::runtime_error("tokenizer.ggml.tokens is empty: no vocabulary");
  c.local_layer.assign(static_cast<std::size_t>(c.layers), false);
  if (a == "llama") {
    // The query projection is hidden x hidden, cut into heads_q heads.
    if (c.hidden % c.heads_q != 0) {
      throw std::runtime_error(a + ": the hidden size " + std::to_string(c.hidden) +
                               " is not a multiple of the " + std::to_string(c.heads_q) +
                               " query heads");
    }
    c.head_dim = c.hidden / c.heads_q;
    if (f.find("llama.rope.dimension_count")) c.head_dim = get("rope.dimension_count");
  } else {
    // Gemma 3: five sliding-window layers, then one global layer; the local layers rotate with
    // base 10000 (not in the file; the architecture fixes it); queries are scaled by
    // 1 / sqrt(head_dim).
    c.head_dim = get("attention.key_length");
    c.sliding_window = get("attention.sliding_window");
    c.rope_base_local = 10000.0;
    for (int l = 0; l < c.layers; ++l) c.local_layer[static_cast<std::size_t>(l)] = l % 6 < 5;
  }
  if (c.heads_q % c.heads_kv != 0) {
    throw std::runtime_error(a + ": " + std::to_string(c.heads_q) +
                             " query heads are not a multiple of " + std::to_string(c.heads_kv) +
                             " KV heads");
  }
  if (c.head_dim % 2 != 0) {
    throw std::runtime_error(a + ": head dim " + std::to_string(c.head_dim) +
                             " is odd (rotary embeddings turn pairs of channels)");
  }
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return c;
}

}  // namespace skipsoftmax
