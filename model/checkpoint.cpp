#include "checkpoint.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <system_error>

#include "file_io.h"
#include "gguf.h"
#include "sha256.h"

namespace skipsoftmax {

namespace fs = std::filesystem;

namespace {

// Nanoseconds since the Unix epoch (the file clock's own epoch is the library's choice).
std::int64_t mtime_ns(const fs::path& path) {
  const auto t = std::chrono::file_clock::to_sys(fs::last_write_time(path));
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

fs::path find_checkpoint_gguf(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == kWeightsExtension && e.is_regular_file(ec)) found.push_back(e);
  }
  if (ec) {
    throw std::invalid_argument(dir.string() + ": cannot list the directory: " +
                                (fs::exists(dir, ec) ? ec.message() : missing_file_reason(dir)));
  }
  if (found.size() == 1) return found.front();
  if (found.empty()) {
    throw std::invalid_argument(dir.string() +
                                ": no *.gguf model file in the checkpoint directory (give "
                                "--weights FILE, or --config-only to export thresholds only)");
  }
  std::sort(found.begin(), found.end());
  std::string names;
  for (const fs::path& p : found) names += (names.empty() ? "" : ", ") + p.filename().string();
  throw std::invalid_argument(dir.string() + ": several *.gguf files (" + names +
                              "); choose one with --weights FILE");
}

WeightsRef pin_weights(const fs::path& gguf) {
  WeightsRef ref;
  ref.file = fs::absolute(gguf).lexically_normal();
  const gguf::File file = gguf::File::open(ref.file);
  ref.architecture_json = architecture_json(read_model_config(file)).dump();
  ref.bytes = fs::file_size(ref.file);
  ref.mtime_ns = mtime_ns(ref.file);
  ref.sha256 = sha256_file(ref.file);
  return ref;
}

void check_weights(const WeightsRef& ref) {
  std::error_code ec;
  if (!fs::is_regular_file(ref.file, ec)) {
    throw std::runtime_error(ref.file.string() +
                             ": the engine's weights file is missing (moved or deleted since "
                             "export?)");
  }
  const auto stale = [&](const std::string& what) {
    return std::runtime_error(ref.file.string() + ": " + what +
                              " differs from what export pinned; the file changed since export: "
                              "run skipsoftmax export again");
  };
  if (fs::file_size(ref.file) != ref.bytes) throw stale("the size");
  if (mtime_ns(ref.file) != ref.mtime_ns && sha256_file(ref.file) != ref.sha256) {
    throw stale("the SHA-256");
  }
}

nlohmann::ordered_json architecture_json(const ModelConfig& c) {
  std::vector<int> local;
  for (int l = 0; l < c.layers; ++l) {
    if (c.is_local(l)) local.push_back(l);
  }
  return {{"name", c.architecture},
          {"layers", c.layers},
          {"hidden", c.hidden},
          {"ffn", c.ffn},
          {"heads_q", c.heads_q},
          {"heads_kv", c.heads_kv},
          {"head_dim", c.head_dim},
          {"vocab", c.vocab},
          {"context_length", c.context_length},
          {"rms_eps", c.rms_eps},
          {"rope_base", c.rope_base},
          {"rope_base_local", c.rope_base_local},
          {"sliding_window", c.sliding_window},
          {"local_layers", local}};
}

ExportPlan export_engine(const fs::path& checkpoint_dir, const fs::path& engine_dir,
                         const PerPhase<PhaseFlags>& flags, const WeightsFlag& weights) {
  const CheckpointConfig checkpoint = load_checkpoint_config(checkpoint_dir);
  ExportPlan plan = plan_export(checkpoint, flags);
  const fs::path checkpoint_abs = fs::canonical(checkpoint_dir);
  std::optional<WeightsRef> pinned;
  if (weights.config_only && weights.file) {
    throw std::invalid_argument("--weights and --config-only are exclusive");
  }
  if (!weights.config_only) {
    pinned = pin_weights(weights.file ? checkpoint_abs / *weights.file  // absolute stays absolute
                                      : find_checkpoint_gguf(checkpoint_abs));
  }
  std::error_code ec;
  if (fs::exists(engine_dir, ec)) {
    if (!fs::is_directory(engine_dir, ec)) {
      throw std::runtime_error(engine_dir.string() + ": exists and is not a directory");
    }
    if (fs::equivalent(checkpoint_abs, engine_dir, ec)) {
      throw std::invalid_argument(engine_dir.string() +
                                  ": is the checkpoint directory; export would overwrite its "
                                  "config.json");
    }
  }
  const std::string text =
      engine_config_json(checkpoint_abs, checkpoint, plan, pinned ? &*pinned : nullptr);
  fs::create_directories(engine_dir);
  write_file_atomic(engine_dir / kConfigFileName, [&](std::ostream& out) { out << text; });
  return plan;
}

}  // namespace skipsoftmax
