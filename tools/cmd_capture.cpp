// skipsoftmax capture --model-dir CHECKPOINT_DIR --text FILE --tokens N --layers 0,5,10
// --out-dir D: runs the first N tokens of a real text through the model on the GPU (dense
// attention) and writes each chosen layer's post-RoPE Q, K and V as .npy files with a JSON
// manifest (model/engine_io.h), for calibration and the attention benchmarks. --logits also writes
// the logits of every token (scripts/check_logits.py compares them with transformers). The
// directory appears whole or not at all.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "commands.h"
#include "engine.h"
#include "engine_io.h"
#include "file_io.h"
#include "model_text.h"
#include "npy.h"
#include "tokenizer.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct CaptureArgs {
  std::string model_dir;
  std::string weights;
  std::string text_file;
  int tokens = 0;
  std::string layers;
  std::string out_dir;
  std::string dtype = "f32";
  bool logits = false;
};

// float32 holds bf16 values exactly; float16 halves the files (values rounded to nearest).
NpyArray to_npy(const std::vector<float>& values, std::vector<std::int64_t> shape, bool f16) {
  NpyArray a;
  a.dtype = f16 ? NpyDtype::kF16 : NpyDtype::kF32;
  a.shape = std::move(shape);
  a.data.resize(values.size() * (f16 ? 2 : 4));
  if (f16) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::uint16_t h = float_to_half(values[i]);
      std::memcpy(a.data.data() + 2 * i, &h, 2);
    }
  } else {
    std::memcpy(a.data.data(), values.data(), a.data.size());
  }
  return a;
}

// Where the capture may go: a new directory or an empty one, in an existing directory.
void check_out_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw std::invalid_argument(dir.string() + ": not a directory");
    if (!fs::is_empty(dir, ec)) {
      throw std::invalid_argument(dir.string() +
                                  ": not empty; captures go to a new or empty "
                                  "directory");
    }
  }
  const fs::path parent = fs::absolute(dir).lexically_normal().parent_path();
  if (!fs::is_directory(parent, ec)) {
    throw std::invalid_argument(dir.string() + ": directory " + parent.string() +
                                " does not exist");
  }
}

void capture(const CaptureArgs& a) {
  if (a.tokens < 1) throw std::invalid_argument("--tokens must be >= 1");
  if (a.dtype != "f32" && a.dtype != "f16") {
    throw std::invalid_argument("--dtype " + a.dtype + ": expected f32 or f16");
  }
  std::error_code ec;
  if (!fs::is_directory(a.model_dir, ec)) {
    throw std::invalid_argument(a.model_dir + ": no such checkpoint directory");
  }
  const fs::path gguf_path =
      a.weights.empty() ? find_checkpoint_gguf(a.model_dir) : fs::path(a.model_dir) / a.weights;
  const gguf::File file = gguf::File::open(gguf_path);
  const ModelConfig model = read_model_config(file);
  const std::vector<int> layers =
      a.layers.empty() ? std::vector<int>{} : parse_layer_list(a.layers, model.layers);
  if (layers.empty() && !a.logits) {
    throw std::invalid_argument("nothing to capture: give --layers and/or --logits");
  }
  if (a.tokens > model.context_length) {
    throw std::invalid_argument("--tokens " + std::to_string(a.tokens) +
                                " exceeds the model's context of " +
                                std::to_string(model.context_length));
  }
  const std::string text = read_text_file(a.text_file);
  if (const std::optional<std::size_t> at = invalid_utf8_at(text)) {
    throw std::invalid_argument("--text " + a.text_file + ": not UTF-8 text (an invalid byte at " +
                                std::to_string(*at) + ")");
  }
  const ModelText model_text(file);
  const std::vector<std::int32_t> ids =
      model_text.encode_prefix(text, static_cast<std::size_t>(a.tokens));
  if (static_cast<int>(ids.size()) < a.tokens) {
    throw std::invalid_argument(a.text_file + ": " + std::to_string(ids.size()) +
                                " tokens, fewer than --tokens " + std::to_string(a.tokens));
  }
  const fs::path out_dir = fs::absolute(a.out_dir).lexically_normal();
  check_out_dir(out_dir);

  Engine engine(file, model, EngineOptions{});  // dense: captures show the full attention
  const ForwardResult r = engine.forward({ids}, {.capture_layers = layers, .all_logits = a.logits});

  const bool f16 = a.dtype == "f16";
  const std::int64_t n = a.tokens, d = model.head_dim;
  // Everything goes to a hidden sibling first, renamed into place at the end.
  const fs::path tmp = out_dir.parent_path() /
                       ("." + out_dir.filename().string() + ".tmp." + std::to_string(getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp);
  try {
    std::vector<std::int64_t> id_values(ids.begin(), ids.end());
    write_npy_atomic(tmp / kCaptureTokensFile, make_npy_int(NpyDtype::kI32, {n}, id_values));
    for (const LayerCapture& c : r.captures[0]) {
      write_npy_atomic(tmp / capture_file(c.layer, 'q'), to_npy(c.q, {n, model.heads_q, d}, f16));
      write_npy_atomic(tmp / capture_file(c.layer, 'k'), to_npy(c.k, {n, model.heads_kv, d}, f16));
      write_npy_atomic(tmp / capture_file(c.layer, 'v'), to_npy(c.v, {n, model.heads_kv, d}, f16));
    }
    if (a.logits) {
      write_npy_atomic(tmp / kCaptureLogitsFile, to_npy(r.logits[0], {n, model.vocab}, false));
    }
    CaptureManifest m;
    m.weights = fs::absolute(gguf_path).lexically_normal().string();
    m.text_file = fs::absolute(a.text_file).lexically_normal().string();
    m.model = model;
    m.tokens = a.tokens;
    m.bos = model_text.adds_bos();
    m.dtype = f16 ? "float16" : "float32";
    m.layers = layers;
    m.logits = a.logits;
    write_json_file(tmp / kCaptureManifestFile, capture_manifest_json(m));
    fs::rename(tmp, out_dir);  // replaces an empty directory
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::cout << "captured " << n << " tokens of " << a.text_file << " in " << out_dir.string()
            << (layers.empty() ? "" : ": layers " + a.layers) << (a.logits ? ", logits" : "")
            << '\n';
}

void add_capture(CLI::App& app) {
  auto a = std::make_shared<CaptureArgs>();
  CLI::App* sub = app.add_subcommand(
      "capture", "Run a text through the model on the GPU and save post-RoPE Q, K, V per layer");
  sub->add_option("--model-dir", a->model_dir, "Checkpoint directory (config.json and a GGUF)")
      ->required();
  sub->add_option("--weights", a->weights, "The GGUF file when the directory has several");
  sub->add_option("--text", a->text_file, "UTF-8 text file to run")->required();
  sub->add_option("--tokens", a->tokens, "Tokens to run (the text's first N, BOS included)")
      ->required();
  sub->add_option("--layers", a->layers, "Layers to capture, e.g. 0,5,10");
  sub->add_option("--out-dir", a->out_dir, "New or empty directory for the .npy files")
      ->required()
      ->check(kNonEmptyPath);
  sub->add_option("--dtype", a->dtype, "f32 (exact bf16 values) or f16")->capture_default_str();
  sub->add_flag("--logits", a->logits,
                "Also write the logits of every token (logits.npy, float32 [tokens, vocab])");
  sub->callback([a] { capture(*a); });
}

const Registration reg{70, &add_capture};

}  // namespace
}  // namespace skipsoftmax::cli
