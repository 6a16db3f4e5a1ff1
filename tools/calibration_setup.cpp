#include "calibration_setup.h"

#include <stdexcept>
#include <vector>

#include "commands.h"
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

std::vector<fs::path> gguf_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("--model-dir " + dir.string() + ": no such directory");
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".gguf") found.push_back(e.path());
  }
  return found;
}

fs::path find_gguf(const fs::path& dir) {
  const std::vector<fs::path> found = gguf_files(dir);
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

void add_pass_flags(CLI::App& sub, PassFlags& f) {
  sub.add_option("--backend", f.backend, "Statistics pass: cpu (float64) or cuda (fp32)")
      ->capture_default_str();
  sub.add_option("--captures-dir", f.captures_dir,
                 "Read post-RoPE Q/K captures (npy + manifest.json) instead of running the CPU "
                 "forward pass");
  sub.add_option("--corpus-dir", f.corpus_dir,
                 "Books of the prompts (default $SKIPSOFTMAX_CORPUS_DIR or /work/shared/corpora)");
  sub.add_option("--decode-steps", f.decode_steps, "Decode steps at the end of each prompt")
      ->capture_default_str();
  sub.add_option("--decode-splits", f.decode_splits, "Split-KV parts of the decode vote")
      ->capture_default_str();
  sub.add_option("--threads", f.threads, "CPU threads (0: all)")->capture_default_str();
}

void check_pass_flags(const PassFlags& f) {
  if (f.decode_steps < 1) {
    fail("--decode-steps must be >= 1, got " + std::to_string(f.decode_steps));
  }
  check_decode_splits(f.decode_splits, "--decode-splits");
  check_threads(f.threads);
  if (f.backend != "cpu" && f.backend != "cuda") {
    fail("unknown --backend '" + f.backend + "' (valid: cpu, cuda)");
  }
#if !SKIPSOFTMAX_HAVE_CUDA
  if (f.backend == "cuda") {
    fail("--backend cuda: this build has no GPU code (nvcc was not found when it was configured)");
  }
#endif
  if (!f.captures_dir.empty() && !fs::is_directory(f.captures_dir)) {
    fail("--captures-dir " + f.captures_dir + ": no such directory");
  }
}

fs::path corpus_dir(const PassFlags& f) {
  return f.corpus_dir.empty() ? default_corpus_dir() : fs::path(f.corpus_dir);
}

StatsBackend stats_backend(const PassFlags& f) {
#if SKIPSOFTMAX_HAVE_CUDA
  if (f.backend == "cuda") {
    if (!hopper_gpu_available()) fail("--backend cuda: no Hopper GPU on this machine");
    return {
        "cuda-f32",
        [](const PrefillProblem& p, const StatsOptions& o) {
          return prefill_tile_stats_cuda(p, o);
        },
        [](const DecodeProblem& p, const StatsOptions& o) { return decode_tile_stats_cuda(p, o); }};
  }
#endif
  (void)f;
  return cpu_stats_backend();
}

std::unique_ptr<CaptureSource> capture_source(const gguf::File& file, const ModelConfig& model,
                                              const fs::path& gguf_path, const PassFlags& f,
                                              bool needs_sha) {
  const std::string sha = needs_sha ? sha256_file(gguf_path) : std::string("unhashed");
  if (f.captures_dir.empty()) return cpu_forward_source(file, model, sha, f.threads);
  return npy_directory_source(f.captures_dir, model, needs_sha ? sha : "");
}

}  // namespace skipsoftmax::cli
