// The file formats of `skipsoftmax run` and `skipsoftmax capture`, apart from the GPU so that CI
// tests them: the request file, the result file, the capture manifest and the layer list.
//
// Request file (run --input-file): a JSON array with one element per request, each either
//   "a prompt"                                     text, tokenized with the model's tokenizer
//   {"prompt": "a prompt", "max_new_tokens": 32, "id": "q1"}
//   {"token_ids": [504, 3458, 28], "id": 7}        token ids, used as given (no BOS added)
// An object has exactly one of prompt and token_ids; max_new_tokens (>= 1) overrides the
// command's --max-new-tokens; id (any JSON value) is echoed in the result. Other keys are errors.
// Text prompts get the model's BOS token first when its GGUF asks for one
// (tokenizer.ggml.add_bos_token); no chat template is applied.
//
// Result file (run --output-file): {"engine_dir", "weights", "architecture", "thresholds",
// "prefill_chunk", "requests": [...], "totals": {...}}; one entry per request, in input order:
//   id, prompt_tokens, generated_tokens, token_ids (generated, the EOS token included when
//   reached), text (the generated tokens but EOS, decoded; invalid UTF-8 replaced by U+FFFD),
//   finish_reason ("eos" or "length"), ttft_ms (from the start of the batch to its first token),
//   tpot_ms (mean time per later token; null with one token), attention_tiles {prefill, decode}
//   {visited, skipped} (the skip kernels' statistics; zero where dense kernels ran).
// totals: requests, prompt_tokens, generated_tokens, wall_ms, prefill_ms, decode_ms,
//   attention_ms and attention_share (null unless run --time-attention), peak_device_memory_bytes
//   (device memory in use, sampled after every step), engine_device_memory_bytes (weights, KV
//   cache and buffers the engine allocated).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model_config.h"

namespace skipsoftmax {

struct RunRequest {
  std::optional<std::string> prompt;    // text, or
  std::vector<std::int32_t> token_ids;  // ids when prompt is absent
  std::optional<int> max_new_tokens;    // absent: the command's default
  nlohmann::json id;                    // null when absent
};

// Throws std::invalid_argument("<context>: ...") naming the request and the problem.
std::vector<RunRequest> parse_run_requests(std::string_view json_text, const std::string& context);

// Throws std::invalid_argument("request <index>: ...") for an empty prompt, an id outside the
// vocabulary, or a prompt and its new tokens longer than the model's context.
void check_request_tokens(std::size_t index, const std::vector<std::int32_t>& tokens,
                          int max_new_tokens, const ModelConfig& model);

// The skip kernels' tile statistics: tiles visited, and skipped of those.
struct TileCount {
  std::uint64_t visited = 0;
  std::uint64_t skipped = 0;
  double sparsity() const {
    return visited == 0 ? 0.0 : static_cast<double>(skipped) / static_cast<double>(visited);
  }
};

struct RunResult {
  nlohmann::json id;
  std::size_t prompt_tokens = 0;
  std::vector<std::int32_t> token_ids;
  std::string text;
  bool reached_eos = false;
  double ttft_ms = 0.0;
  std::optional<double> tpot_ms;
  TileCount prefill_tiles, decode_tiles;
};

struct RunTotals {
  double wall_ms = 0.0;
  double prefill_ms = 0.0;
  double decode_ms = 0.0;
  std::optional<double> attention_ms;
  std::uint64_t peak_device_memory_bytes = 0;
  std::uint64_t engine_device_memory_bytes = 0;
};

struct RunHeader {
  std::string engine_dir;
  std::string weights;
  std::string architecture;
  std::string prefill_threshold;  // Threshold::describe()
  std::string decode_threshold;
  int prefill_chunk = 0;
};

nlohmann::json run_output_json(const RunHeader& header, const std::vector<RunResult>& results,
                               const RunTotals& totals);

// JSON text for files whose strings may hold invalid UTF-8 (generated text cut inside a
// character): such bytes become U+FFFD instead of failing the whole write.
std::string dump_json_lenient(const nlohmann::json& value);

// "0,5,10" -> {0, 5, 10}. Throws std::invalid_argument for a malformed, repeated or out-of-range
// layer (valid: [0, num_layers)).
std::vector<int> parse_layer_list(std::string_view text, int num_layers);

// The capture manifest (capture --out-dir D writes D/manifest.json): the model, the token count
// and ids file, the heads, the rotary embedding, per layer its window and its files, and the
// logits file when captured.
struct CaptureManifest {
  std::string weights;  // the GGUF file
  std::string text_file;
  ModelConfig model;
  int tokens = 0;
  bool bos = false;   // the token ids start with the BOS token
  std::string dtype;  // "float32" or "float16"
  std::vector<int> layers;
  bool logits = false;  // logits.npy was written
};
nlohmann::json capture_manifest_json(const CaptureManifest& m);
// File names inside the capture directory.
std::string capture_file(int layer, char tensor);  // tensor: 'q', 'k' or 'v': "layer05_q.npy"
inline constexpr const char* kCaptureTokensFile = "tokens.npy";
inline constexpr const char* kCaptureManifestFile = "manifest.json";
inline constexpr const char* kCaptureLogitsFile = "logits.npy";

}  // namespace skipsoftmax
