#include "calibration_setup.h"

#include <stdexcept>
#include <vector>

#include "sha256.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"
#if SKIPSOFTMAX_HAVE_CUDA
#include "calibration_cuda.h"
#endif

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

}  // namespace

fs::path find_gguf(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("--model-dir " + dir.string() + ": no such directory");
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".gguf") found.push_back(e.path());
  }
  if (found.empty()) fail("--model-dir " + dir.string() + ": no .gguf model file in it");
  if (found.size() > 1) {
    std::string names;
    for (const fs::path& p : found) names += (names.empty() ? "" : ", ") + p.filename().string();
    fail("--model-dir " + dir.string() + ": several .gguf files (" + names + "); keep one");
  }
  return found.front();
}

PerPhase<bool> parse_phases(const std::string& phase) {
  if (phase == "prefill") return {true, false};
  if (phase == "decode") return {false, true};
  if (phase == "both") return {true, true};
  fail("unknown --phase '" + phase + "' (valid: prefill, decode, both)");
}

void check_backend_flag(const std::string& backend) {
  if (backend != "cpu" && backend != "cuda") {
    fail("unknown --backend '" + backend + "' (valid: cpu, cuda)");
  }
#if !SKIPSOFTMAX_HAVE_CUDA
  if (backend == "cuda") {
    fail("--backend cuda: this build has no GPU code (nvcc was not found when it was configured)");
  }
#endif
}

StatsBackend stats_backend(const std::string& backend) {
#if SKIPSOFTMAX_HAVE_CUDA
  if (backend == "cuda") {
    if (!hopper_gpu_available()) fail("--backend cuda: no Hopper GPU on this machine");
    return {
        "cuda-f32",
        [](const PrefillProblem& p, const StatsOptions& o) {
          return prefill_tile_stats_cuda(p, o);
        },
        [](const DecodeProblem& p, const StatsOptions& o) { return decode_tile_stats_cuda(p, o); }};
  }
#endif
  (void)backend;
  return cpu_stats_backend();
}

void check_captures_dir(const std::string& captures_dir) {
  if (!captures_dir.empty() && !fs::is_directory(captures_dir)) {
    fail("--captures-dir " + captures_dir + ": no such directory");
  }
}

std::unique_ptr<CaptureSource> capture_source(const gguf::File& file, const ModelConfig& model,
                                              const fs::path& gguf_path,
                                              const std::string& captures_dir, bool needs_sha,
                                              int threads) {
  const std::string sha = needs_sha ? sha256_file(gguf_path) : std::string("unhashed");
  if (captures_dir.empty()) return cpu_forward_source(file, model, sha, threads);
  return npy_directory_source(captures_dir, model, needs_sha ? sha : "");
}

}  // namespace skipsoftmax::cli
