#include "model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
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

ModelConfig read_hf_attention_config(std::string_view json_text, const std::string& context) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(context + ": malformed JSON: " + e.what());
  }
  if (!root.is_object()) throw std::runtime_error(context + ": expected a JSON object");
  const nlohmann::json& j = root.contains("text_config") && root.at("text_config").is_object()
                                ? root.at("text_config")
                                : root;
  const auto get = [&](const char* key) -> std::int64_t {
    if (!j.contains(key) || !j.at(key).is_number_integer()) {
      throw std::runtime_error(context + ": " + key + " is missing or not an integer");
    }
    return j.at(key).get<std::int64_t>();
  };
  const auto get_or = [&](const char* key, std::int64_t fallback) {
    return j.contains(key) && !j.at(key).is_null() ? get(key) : fallback;
  };
  ModelConfig c;
  c.architecture = j.value("model_type", root.value("model_type", std::string("unknown")));
  c.layers = to_int(get("num_hidden_layers"), "num_hidden_layers");
  c.heads_q = to_int(get("num_attention_heads"), "num_attention_heads");
  c.heads_kv = to_int(get_or("num_key_value_heads", c.heads_q), "num_key_value_heads");
  const std::int64_t hidden = get_or("hidden_size", 0);
  const std::int64_t head_dim = get_or("head_dim", hidden > 0 ? hidden / c.heads_q : 0);
  c.head_dim = to_int(head_dim, "head_dim");
  c.context_length = to_int(get("max_position_embeddings"), "max_position_embeddings");
  if (c.heads_q % c.heads_kv != 0) {
    throw std::runtime_error(context + ": " + std::to_string(c.heads_q) +
                             " query heads are not a multiple of " + std::to_string(c.heads_kv) +
                             " KV heads");
  }
  c.local_layer.assign(static_cast<std::size_t>(c.layers), false);
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const nlohmann::json& types = j.at("layer_types");
    if (!types.is_array() || types.size() != static_cast<std::size_t>(c.layers)) {
      throw std::runtime_error(context + ": layer_types must list the " + std::to_string(c.layers) +
                               " layers");
    }
    for (int l = 0; l < c.layers; ++l) {
      const nlohmann::json& t = types[static_cast<std::size_t>(l)];
      c.local_layer[static_cast<std::size_t>(l)] = t.is_string() && t == "sliding_attention";
    }
    c.sliding_window = static_cast<int>(get_or("sliding_window", 0));
  } else if (j.contains("sliding_window_pattern") && !j.at("sliding_window_pattern").is_null()) {
    // Gemma 2 / 3 hub configs: every pattern-th layer is global, the others local.
    const std::int64_t pattern = get("sliding_window_pattern");
    if (pattern < 1) throw std::runtime_error(context + ": sliding_window_pattern must be >= 1");
    for (int l = 0; l < c.layers; ++l)
      c.local_layer[static_cast<std::size_t>(l)] = (l + 1) % pattern != 0;
    c.sliding_window = static_cast<int>(get_or("sliding_window", 0));
  } else if (j.contains("sliding_window") && !j.at("sliding_window").is_null() &&
             j.value("use_sliding_window", true)) {
    // Mistral-style: one window on every layer (Qwen2 sets it but turns it off).
    c.sliding_window = static_cast<int>(get("sliding_window"));
    c.local_layer.assign(static_cast<std::size_t>(c.layers), true);
  }
  double scale_base = static_cast<double>(c.head_dim);
  if (j.contains("query_pre_attn_scalar") && j.at("query_pre_attn_scalar").is_number()) {
    scale_base = j.at("query_pre_attn_scalar").get<double>();
    if (!(scale_base > 0.0))
      throw std::runtime_error(context + ": query_pre_attn_scalar must be > 0");
  }
  c.attention_scale = 1.0 / std::sqrt(scale_base);
  return c;
}

}  // namespace skipsoftmax
