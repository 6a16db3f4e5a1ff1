// The attention geometry of a Hugging Face config.json (calibration of a checkpoint without a
// GGUF), and the prompt sets calibration draws from captures.
#include <gtest/gtest.h>

#include <cmath>

#include "calibrate.h"
#include "model_config.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

TEST(HfAttentionConfig, ReadsALlamaConfig) {
  const ModelConfig c = read_hf_attention_config(R"({
      "model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576,
      "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192})",
                                                 "config.json");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.heads_q, 9);
  EXPECT_EQ(c.heads_kv, 3);
  EXPECT_EQ(c.head_dim, 64);  // hidden / heads where head_dim is absent
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.local_layer, std::vector<bool>(30, false));
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 8.0);
}

TEST(HfAttentionConfig, ReadsGemma3sTextConfigLayerTypesAndScale) {
  const ModelConfig c = read_hf_attention_config(R"({"model_type": "gemma3", "text_config": {
      "model_type": "gemma3_text", "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 144,
      "max_position_embeddings": 32768, "sliding_window": 512,
      "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}})",
                                                 "config.json");
  EXPECT_EQ(c.architecture, "gemma3_text");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.local_layer, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 12.0);
}

TEST(HfAttentionConfig, ReadsAPatternOrAWindowOnEveryLayer) {
  // Gemma 3 hub configs without layer_types: every 6th layer global.
  const ModelConfig gemma = read_hf_attention_config(R"({"model_type": "gemma3_text",
      "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 256, "max_position_embeddings": 32768, "sliding_window": 512,
      "sliding_window_pattern": 6})",
                                                     "c.json");
  EXPECT_EQ(gemma.local_layer, (std::vector<bool>{true, true, true, true, true, false, true}));
  const ModelConfig mistral = read_hf_attention_config(R"({"model_type": "mistral",
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 64, "max_position_embeddings": 32768, "sliding_window": 4096})",
                                                       "c.json");
  EXPECT_EQ(mistral.local_layer, (std::vector<bool>{true, true}));
  const ModelConfig qwen = read_hf_attention_config(R"({"model_type": "qwen2",
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 64, "max_position_embeddings": 32768, "sliding_window": 4096,
      "use_sliding_window": false})",
                                                    "c.json");
  EXPECT_EQ(qwen.local_layer, (std::vector<bool>{false, false}));
}

TEST(HfAttentionConfig, BadConfigsAreNamed) {
  const auto read = [](const char* text) { return read_hf_attention_config(text, "c.json"); };
  EXPECT_ERROR_HAS(read("{"), "c.json: malformed JSON");
  EXPECT_ERROR_HAS(read(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64})"),
                   "c.json: max_position_embeddings is missing");
  EXPECT_ERROR_HAS(read(R"({"num_hidden_layers": 2, "num_attention_heads": 4,
                            "num_key_value_heads": 3, "head_dim": 64,
                            "max_position_embeddings": 128})"),
                   "4 query heads are not a multiple of 3 KV heads");
  EXPECT_ERROR_HAS(read(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64,
                            "max_position_embeddings": 128, "layer_types": ["full_attention"]})"),
                   "layer_types must list the 2 layers");
}

TEST(CapturedPromptSet, GivesEachLengthsPromptsInOrderAndNamesWhatIsMissing) {
  const PromptFn prompts = captured_prompt_set({{1, 2, 3}, {4, 5}, {6, 7, 8}, {9, 10}});
  EXPECT_EQ(prompts(3, 0), (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(prompts(3, 1), (std::vector<std::int32_t>{6, 7, 8}));
  EXPECT_EQ(prompts(2, 1), (std::vector<std::int32_t>{9, 10}));
  EXPECT_ERROR_HAS(prompts(3, 2),
                   "hold 2 prompt(s) of 3 tokens, calibration needs 3 (they hold "
                   "2 x 2, 2 x 3 tokens)");
  EXPECT_ERROR_HAS(prompts(7, 0), "hold 0 prompt(s) of 7 tokens");
}

}  // namespace
}  // namespace skipsoftmax
