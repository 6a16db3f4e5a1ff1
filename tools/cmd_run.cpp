// skipsoftmax run --engine-dir E --input-file in.json --output-file out.json: greedy generation
// on the GPU for a batch of prompts, with the thresholds the engine config holds at launch (edit
// it to re-target; nothing is rebuilt). File formats: model/engine_io.h.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "commands.h"
#include "engine.h"
#include "engine_io.h"
#include "eval_runner.h"
#include "file_io.h"
#include "model_text.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct RunArgs {
  std::string engine_dir;
  std::string input_file;
  std::string output_file;
  int max_new_tokens = 64;
  int prefill_chunk = 0;
  int page_size = 64;
  bool time_attention = false;
  std::string dtype = "fp16";
};

void run(const RunArgs& a) {
  if (a.max_new_tokens < 1) throw std::invalid_argument("--max-new-tokens must be >= 1");
  if (a.prefill_chunk < 0) throw std::invalid_argument("--prefill-chunk must be >= 0");
  const DType dtype = parse_engine_dtype(a.dtype);
  const EngineConfig config = load_engine_config(a.engine_dir);
  if (!config.weights) {
    throw std::invalid_argument(
        (fs::path(a.engine_dir) / kConfigFileName).string() +
        ": no weights (exported with --config-only); export the checkpoint with its GGUF file");
  }
  check_weights(*config.weights);
  const gguf::File file = gguf::File::open(config.weights->file);
  const ModelConfig model = read_model_config(file);
  const std::vector<RunRequest> requests =
      parse_run_requests(read_json_text(a.input_file), a.input_file);
  check_output_file(a.output_file);  // before any GPU work
  check_not_an_input(a.output_file, "--output-file",
                     {{"--input-file", a.input_file},
                      {"--engine-dir", a.engine_dir, true},
                      {"the engine's checkpoint", config.checkpoint_dir, true},
                      {"the engine's weights", config.weights->file}});

  const ModelText text(file);
  std::vector<GenerationRequest> batch;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RunRequest& r = requests[i];
    GenerationRequest g;
    if (r.prompt) {
      if (!text.available()) {
        throw std::invalid_argument("request " + std::to_string(i) +
                                    ": a text prompt needs the model's tokenizer, which is not "
                                    "available (" +
                                    text.unavailable_reason() + "); give token_ids instead");
      }
      g.prompt = text.encode(*r.prompt);
    } else {
      g.prompt = r.token_ids;
    }
    g.max_new_tokens = r.max_new_tokens.value_or(a.max_new_tokens);
    check_request_tokens(i, g.prompt, g.max_new_tokens, model);
    batch.push_back(std::move(g));
  }
  if (!text.available()) {
    std::cerr << "skipsoftmax run: note: no tokenizer (" << text.unavailable_reason()
              << "): the results hold token ids and empty texts\n";
  }

  EngineOptions options;
  options.page_size = a.page_size;
  options.prefill_chunk = a.prefill_chunk;
  options.thresholds = {config.phases.prefill.threshold, config.phases.decode.threshold};
  options.time_attention = a.time_attention;
  options.dtype = dtype;
  Engine engine(file, model, options);
  const GenerationReport report = engine.generate(batch, text.eos());

  std::vector<RunResult> results;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const GenerationResult& g = report.results[i];
    RunResult r;
    r.id = requests[i].id;
    r.prompt_tokens = batch[i].prompt.size();
    r.token_ids = g.tokens;
    r.reached_eos = g.reached_eos;
    if (text.available()) {
      std::vector<std::int32_t> shown = g.tokens;
      if (g.reached_eos) shown.pop_back();
      r.text = text.decode(shown);
    }
    r.ttft_ms = g.ttft_ms;
    if (g.tokens.size() > 1) {
      r.tpot_ms = (g.last_token_ms - g.ttft_ms) / static_cast<double>(g.tokens.size() - 1);
    }
    r.prefill_tiles = {g.tiles.prefill.visited, g.tiles.prefill.skipped};
    r.decode_tiles = {g.tiles.decode.visited, g.tiles.decode.skipped};
    results.push_back(std::move(r));
  }
  RunTotals totals;
  totals.wall_ms = report.prefill_ms + report.decode_ms;
  totals.prefill_ms = report.prefill_ms;
  totals.decode_ms = report.decode_ms;
  if (a.time_attention) {
    totals.attention_ms = report.attention_ms.prefill + report.attention_ms.decode;
  }
  totals.peak_device_memory_bytes = report.peak_device_used_bytes;
  totals.engine_device_memory_bytes = engine.device_bytes_peak();
  RunHeader header;
  header.engine_dir = fs::absolute(a.engine_dir).lexically_normal().string();
  header.weights = config.weights->file.string();
  header.architecture = model.architecture;
  header.prefill_threshold = config.phases.prefill.threshold.describe();
  header.decode_threshold = config.phases.decode.threshold.describe();
  header.prefill_chunk = a.prefill_chunk;
  const std::string out = dump_json_lenient(run_output_json(header, results, totals));
  write_file_atomic(a.output_file, [&](std::ostream& o) { o << out; });

  std::size_t generated = 0;
  for (const RunResult& r : results) generated += r.token_ids.size();
  std::printf("wrote %s: %zu requests, %zu tokens generated, prefill %.1f ms, decode %.1f ms\n",
              a.output_file.c_str(), results.size(), generated, report.prefill_ms,
              report.decode_ms);
}

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run", "Generate greedily on the GPU for a batch of prompts with an exported engine");
  sub->add_option("--engine-dir", a->engine_dir, "Engine directory (skipsoftmax export)")
      ->required();
  sub->add_option("--input-file", a->input_file,
                  "Requests: a JSON array of prompt strings or {\"prompt\"|\"token_ids\", "
                  "\"max_new_tokens\", \"id\"} objects")
      ->required();
  sub->add_option("--output-file", a->output_file,
                  "Results JSON: texts, token ids and counts, TTFT/TPOT, memory")
      ->required();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate per request")
      ->capture_default_str();
  sub->add_option("--prefill-chunk", a->prefill_chunk,
                  "Prefill prompts in chunks of this many tokens over the KV cache (0: whole)")
      ->capture_default_str();
  sub->add_option("--page-size", a->page_size, "Tokens per KV-cache page (16 to 128)")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype,
                  "16-bit type of the weights, activations and KV cache: fp16 or bf16")
      ->capture_default_str();
  sub->add_flag("--time-attention", a->time_attention,
                "Time the attention kernels with CUDA events (attention_ms in the totals)");
  sub->callback([a] { run(*a); });
}

const Registration reg{60, &add_run};

}  // namespace
}  // namespace skipsoftmax::cli
