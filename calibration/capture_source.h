// Where calibration gets post-RoPE queries and keys of real text, layer by layer: one small
// interface, two sources.
//
//   cpu_forward_source   runs the CPU reference forward pass (model_ref.h) on the prompt: exact,
//                        slow, short prompts only.
//   npy_directory_source reads captures another engine wrote (the GPU engine's `skipsoftmax
//                        capture`): a directory holding, for each prompt, a manifest.json
//                        (directly in it, or one level of subdirectories down):
//     {
//       "tokens": "tokens.npy",                 // int32/int64 [n], or the ids inline as an array
//       "layers": [{"layer": 0, "q": "q_00.npy", "k": "k_00.npy", "v": "v_00.npy"}, ...],
//       "model_sha256": "..."                   // optional; checked against the model if present
//     }
//     q: [n, heads_q, head_dim], k (and the optional v): [n, heads_kv, head_dim], post-RoPE, any
//     float dtype .npy reads (f2/f4/f8; bf16 saved as f4). Paths are relative to the manifest.
//     A prompt is found by its tokens: `skipsoftmax calibrate --write-samples DIR` writes the
//     prompts to capture.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf.h"
#include "model_config.h"
#include "model_ref.h"

namespace skipsoftmax {

class CaptureSource {
 public:
  virtual ~CaptureSource() = default;
  // What produces the captures (the model's checksum, the capture set's): a part of the key of
  // cached statistics.
  virtual std::string identity() const = 0;
  // Calls sink once per layer of `layers`, in that order, with the layer's q and k (v may be
  // empty) for the prompt `tokens`. Throws std::runtime_error naming what is missing or mis-shaped.
  virtual void capture(std::span<const std::int32_t> tokens, std::span<const int> layers,
                       const std::function<void(LayerCapture&&)>& sink) = 0;
  // The prompts it holds captures of, in its order; empty for a source that runs any prompt.
  virtual std::vector<std::vector<std::int32_t>> prompts() const { return {}; }
};

// `file` and `config` must outlive the source.
std::unique_ptr<CaptureSource> cpu_forward_source(const gguf::File& file, const ModelConfig& config,
                                                  std::string model_sha256, int num_threads);

// Indexes the manifests under dir. Throws std::runtime_error for a missing directory, no
// manifest, a malformed one, or a model_sha256 other than model_sha256 (when both are known).
std::unique_ptr<CaptureSource> npy_directory_source(const std::filesystem::path& dir,
                                                    const ModelConfig& config,
                                                    const std::string& model_sha256);

}  // namespace skipsoftmax
