#include "capture_source.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "file_io.h"
#include "npy.h"
#include "sha256.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

class CpuForwardSource final : public CaptureSource {
 public:
  CpuForwardSource(const gguf::File& file, const ModelConfig& config, std::string sha, int threads)
      : file_(file), config_(config), sha_(std::move(sha)), threads_(threads) {}

  std::string identity() const override { return "cpu-forward:" + sha_; }

  void capture(std::span<const std::int32_t> tokens, std::span<const int> layers,
               const std::function<void(LayerCapture&&)>& sink) override {
    CpuForwardOptions opt;
    opt.capture_layers.assign(layers.begin(), layers.end());
    opt.num_threads = threads_;
    CpuForwardResult r = cpu_forward(file_, config_, tokens, opt);
    for (int layer : layers) {
      const auto it = std::find_if(r.captures.begin(), r.captures.end(),
                                   [&](const LayerCapture& c) { return c.layer == layer; });
      if (it == r.captures.end()) {
        throw std::runtime_error("cpu_forward returned no capture of layer " +
                                 std::to_string(layer));
      }
      sink(std::move(*it));
    }
  }

 private:
  const gguf::File& file_;
  const ModelConfig& config_;
  std::string sha_;
  int threads_;
};

struct Manifest {
  fs::path path;
  nlohmann::json json;
};

std::string tokens_key(std::span<const std::int32_t> tokens) {
  Sha256 h;
  h.update(tokens.data(), tokens.size_bytes());
  return h.hex_digest();
}

std::vector<std::int32_t> manifest_tokens(const Manifest& m) {
  const nlohmann::json& t = m.json.at("tokens");
  std::vector<std::int32_t> ids;
  if (t.is_array()) return t.get<std::vector<std::int32_t>>();
  if (!t.is_string()) throw std::runtime_error("\"tokens\" is neither a file name nor an array");
  const fs::path file = m.path.parent_path() / t.get<std::string>();
  for (std::int64_t id : to_int64_vector(read_npy(file), file.string())) {
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

// The array of `file` as float, checked to be [tokens, heads, head_dim] (not flattened or
// transposed: the element count alone would take either) and finite.
std::vector<float> read_tensor(const fs::path& file, std::int64_t tokens, int heads, int head_dim) {
  const NpyArray a = read_npy(file);
  const std::vector<std::int64_t> want = {tokens, heads, head_dim};
  if (a.shape != want) {
    throw std::runtime_error(file.string() + ": shape " + npy_shape_string(a.shape) +
                             ", expected " + npy_shape_string(want) + " (tokens, heads, head dim)");
  }
  std::vector<float> values = to_float_vector(a, file.string());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw std::runtime_error(file.string() + ": element " + std::to_string(i) + " is " +
                               std::to_string(values[i]) + "; captured Q/K must be finite");
    }
  }
  return values;
}

// Each "layers" entry names its layer and its q and k files.
void check_layer_entries(const nlohmann::json& layers) {
  if (!layers.is_array()) throw std::runtime_error("\"layers\" must be an array");
  for (const nlohmann::json& e : layers) {
    if (!e.is_object() || !e.contains("layer") || !e.at("layer").is_number_integer() ||
        !e.contains("q") || !e.at("q").is_string() || !e.contains("k") || !e.at("k").is_string()) {
      throw std::runtime_error(
          "each \"layers\" entry needs an integer \"layer\" and file names \"q\" and \"k\", "
          "got " +
          e.dump());
    }
  }
}

class NpyDirectorySource final : public CaptureSource {
 public:
  NpyDirectorySource(const fs::path& dir, const ModelConfig& config,
                     const std::string& model_sha256)
      : config_(config) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      throw std::runtime_error(dir.string() + ": no such captures directory");
    }
    std::vector<fs::path> paths;
    if (fs::is_regular_file(dir / "manifest.json")) paths.push_back(dir / "manifest.json");
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && fs::is_regular_file(e.path() / "manifest.json")) {
        paths.push_back(e.path() / "manifest.json");
      }
    }
    if (paths.empty()) {
      throw std::runtime_error(dir.string() +
                               ": no manifest.json in it or in its subdirectories (see "
                               "calibration/capture_source.h for the layout)");
    }
    std::sort(paths.begin(), paths.end());
    Sha256 id;
    for (const fs::path& p : paths) {
      const std::string text = read_json_text(p);
      id.update(text);
      Manifest m{p, parse_json_text(text, p.string())};
      try {
        if (!m.json.is_object() || !m.json.contains("layers") || !m.json.contains("tokens")) {
          throw std::runtime_error("expected an object with \"tokens\" and \"layers\"");
        }
        if (m.json.contains("model_sha256") && !model_sha256.empty() &&
            m.json.at("model_sha256").get<std::string>() != model_sha256) {
          throw std::runtime_error("captured from model " +
                                   m.json.at("model_sha256").get<std::string>() +
                                   ", not from this one (" + model_sha256 + ")");
        }
        check_layer_entries(m.json.at("layers"));
        std::vector<std::int32_t> tokens = manifest_tokens(m);
        by_tokens_[tokens_key(tokens)] = m;
        prompts_.push_back(std::move(tokens));
      } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(p.string() + ": " + json_error_reason(e.what()));
      } catch (const std::exception& e) {
        throw std::runtime_error(p.string() + ": " + e.what());
      }
    }
    identity_ = "npy-dir:" + id.hex_digest();
  }

  std::string identity() const override { return identity_; }
  std::vector<std::vector<std::int32_t>> prompts() const override { return prompts_; }

  void capture(std::span<const std::int32_t> tokens, std::span<const int> layers,
               const std::function<void(LayerCapture&&)>& sink) override {
    const auto found = by_tokens_.find(tokens_key(tokens));
    if (found == by_tokens_.end()) {
      throw std::runtime_error(
          "no capture of this prompt (" + std::to_string(tokens.size()) +
          " tokens) among the manifests; write the prompts with --write-samples and capture "
          "them");
    }
    const Manifest& m = found->second;
    const auto n = static_cast<std::int64_t>(tokens.size());
    for (int layer : layers) {
      const nlohmann::json* entry = nullptr;
      for (const nlohmann::json& e : m.json.at("layers")) {
        if (e.at("layer").get<int>() == layer) entry = &e;
      }
      if (!entry) {
        throw std::runtime_error(m.path.string() + ": no layer " + std::to_string(layer));
      }
      const fs::path dir = m.path.parent_path();
      LayerCapture c;
      c.layer = layer;
      c.q = read_tensor(dir / entry->at("q").get<std::string>(), n, config_.heads_q,
                        config_.head_dim);
      c.k = read_tensor(dir / entry->at("k").get<std::string>(), n, config_.heads_kv,
                        config_.head_dim);
      sink(std::move(c));
    }
  }

 private:
  const ModelConfig& config_;
  std::map<std::string, Manifest> by_tokens_;
  std::vector<std::vector<std::int32_t>> prompts_;  // in the manifests' path order
  std::string identity_;
};

}  // namespace

std::unique_ptr<CaptureSource> cpu_forward_source(const gguf::File& file, const ModelConfig& config,
                                                  std::string model_sha256, int num_threads) {
  return std::make_unique<CpuForwardSource>(file, config, std::move(model_sha256), num_threads);
}

std::unique_ptr<CaptureSource> npy_directory_source(const fs::path& dir, const ModelConfig& config,
                                                    const std::string& model_sha256) {
  return std::make_unique<NpyDirectorySource>(dir, config, model_sha256);
}

}  // namespace skipsoftmax
