// The GPU engine on the real checkpoints (SKIPSOFTMAX_SMOLLM2_GGUF, SKIPSOFTMAX_GEMMA3_GGUF, set
// by scripts/test.sh when models/ has them) against the CPU reference forward pass (model_ref.h)
// and against itself: logits and post-RoPE Q/K/V, chunked against one-shot prefill, a ragged
// batch against single runs, a skip engine whose table cannot skip against the dense one, and the
// run command end to end. Skipped without a Hopper GPU or without the files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine.h"
#include "evaluation.h"
#include "file_io.h"
#include "gguf.h"
#include "model_config.h"
#include "model_ref.h"
#include "price.h"
#include "skipsoftmax/prefill.h"
#include "tokenizer.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Checkpoint {
  const char* name;
  const char* env;
  int logit_tokens;  // tokens of the comparison with the CPU: Gemma's go past its 512 window
  int long_prompt;   // the longest prompt of the batch tests
};

void PrintTo(const Checkpoint& c, std::ostream* os) { *os << c.name; }

const Checkpoint kCheckpoints[] = {{"SmolLM2", "SKIPSOFTMAX_SMOLLM2_GGUF", 256, 300},
                                   {"Gemma3", "SKIPSOFTMAX_GEMMA3_GGUF", 640, 600}};

// Real tokens for Gemma 3 until its SentencePiece tokenizer is here: the text's longest
// vocabulary pieces from left to right ("▁" marks a space; byte tokens <0xNN> cover the rest).
std::vector<std::int32_t> longest_pieces(const gguf::File& f, const std::string& text) {
  const std::vector<std::string>& vocab = f.strings("tokenizer.ggml.tokens");
  std::unordered_map<std::string, std::int32_t> ids;
  std::size_t longest = 0;
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    ids.emplace(vocab[i], static_cast<std::int32_t>(i));
    longest = std::max(longest, vocab[i].size());
  }
  std::string s;
  for (char c : text) s += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = std::min(longest, s.size() - i);
    for (; len > 0; --len) {
      if (const auto it = ids.find(s.substr(i, len)); it != ids.end()) {
        out.push_back(it->second);
        break;
      }
    }
    if (len == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "<0x%02X>", static_cast<unsigned char>(s[i]));
      const auto it = ids.find(byte);
      out.push_back(it != ids.end() ? it->second : 0);
      len = 1;
    }
    i += len;
  }
  return out;
}

struct Model {
  gguf::File file;
  ModelConfig config;
  std::vector<std::int32_t> tokens;  // the test text, BOS first where the model wants one
  std::int32_t eos;
};

std::optional<Model> load(const Checkpoint& c) {
  const char* path = std::getenv(c.env);
  if (!path || !fs::exists(path)) return std::nullopt;
  gguf::File file = gguf::File::open(path);
  ModelConfig config = read_model_config(file);
  const std::string text = read_text_file(fs::path(SKIPSOFTMAX_TEST_DATA) / "engine_text.txt");
  std::vector<std::int32_t> tokens;
  if (const gguf::Value* bos = file.find("tokenizer.ggml.add_bos_token");
      bos && std::get<bool>(*bos)) {
    tokens.push_back(static_cast<std::int32_t>(file.integer("tokenizer.ggml.bos_token_id")));
  }
  const std::vector<std::int32_t> body = config.architecture == "llama"
                                             ? BpeTokenizer::from_gguf(file).encode(text)
                                             : longest_pieces(file, text);
  tokens.insert(tokens.end(), body.begin(), body.end());
  const auto eos = static_cast<std::int32_t>(file.integer("tokenizer.ggml.eos_token_id"));
  return Model{std::move(file), std::move(config), std::move(tokens), eos};
}

std::vector<std::int32_t> head(const std::vector<std::int32_t>& v, std::size_t n,
                               std::size_t from = 0) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + n)};
}

class GpuEngine : public ::testing::TestWithParam<Checkpoint> {
 protected:
  void SetUp() override {
    if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine";
    model_ = load(GetParam());
    if (!model_) GTEST_SKIP() << GetParam().env << " not set";
  }
  Engine engine(int page_size = 64, int prefill_chunk = 0, Threshold threshold = {},
                bool time_attention = false, DType dtype = DType::kF16) const {
    EngineOptions o;
    o.dtype = dtype;
    o.page_size = page_size;
    o.prefill_chunk = prefill_chunk;
    o.thresholds = {threshold, threshold};
    o.time_attention = time_attention;
    return Engine(model_->file, model_->config, o);
  }
  std::optional<Model> model_;
};

struct LogitComparison {
  double top1_agreement = 0.0;
  double max_abs_diff = 0.0;
  double max_abs_ref = 0.0;
};

LogitComparison compare_logits(const std::vector<float>& got, const std::vector<float>& ref,
                               std::size_t vocab) {
  LogitComparison c;
  const std::size_t rows = ref.size() / vocab;
  std::size_t agree = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto g = got.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    const auto e = ref.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    agree += std::max_element(g, g + static_cast<std::ptrdiff_t>(vocab)) - g ==
             std::max_element(e, e + static_cast<std::ptrdiff_t>(vocab)) - e;
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    c.max_abs_diff = std::max(c.max_abs_diff, double(std::abs(got[i] - ref[i])));
    c.max_abs_ref = std::max(c.max_abs_ref, double(std::abs(ref[i])));
  }
  c.top1_agreement = double(agree) / double(rows);
  return c;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// The engine rotates llama.cpp's adjacent pairs (2i, 2i+1) of the GGUF's Q/K rows; cpu_forward
// returns transformers' half-split layout (i, i + d/2). The same permutation of head_dim on Q and
// K leaves every score unchanged; for the comparison, bring the engine's captures to that layout.
std::vector<float> half_split(const std::vector<float>& x, int d) {
  std::vector<float> out(x.size());
  for (std::size_t h = 0; h < x.size() / d; ++h) {
    for (int i = 0; i < d / 2; ++i) {
      out[h * d + i] = x[h * d + 2 * i];
      out[h * d + i + d / 2] = x[h * d + 2 * i + 1];
    }
  }
  return out;
}

TEST_P(GpuEngine, LogitsAndCapturesMatchTheCpuForward) {
  const Model& m = *model_;
  const std::vector<std::int32_t> tokens = head(m.tokens, GetParam().logit_tokens);
  const int last = m.config.layers - 1;
  const std::vector<int> layers = {0, std::min(5, last), last};
  const CpuForwardResult cpu = cpu_forward(
      m.file, m.config, tokens, {.capture_layers = layers, .all_logits = true, .num_threads = 0});
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const bool fp16 = dtype == DType::kF16;
    Engine e = engine(64, 0, {}, false, dtype);
    const ForwardResult gpu = e.forward({tokens}, {.capture_layers = layers, .all_logits = true});
    ASSERT_EQ(gpu.logits[0].size(), cpu.logits.size());
    const LogitComparison c = compare_logits(gpu.logits[0], cpu.logits, m.config.vocab);
    std::printf(
        "%s, %s, %zu tokens: top-1 agreement %.4f, max |logit diff| %.4f (max |logit| "
        "%.2f)\n",
        GetParam().name, fp16 ? "fp16" : "bf16", tokens.size(), c.top1_agreement, c.max_abs_diff,
        c.max_abs_ref);
    // 16-bit weights and activations against float32: near-ties of a small model flip under the
    // rounding. bf16 (H200, 874ad63+): SmolLM2 98.83%, max diff 0.87 of 41.8; Gemma 3 99.06%,
    // 1.55 of 58.0. fp16 keeps 3 more mantissa bits.
    EXPECT_GE(c.top1_agreement, fp16 ? 0.99 : 0.98);
    EXPECT_LE(c.max_abs_diff, (fp16 ? 0.02 : 0.05) * c.max_abs_ref);
    // Q and K after the rotary embedding (and Gemma's q/k norms), as the attention kernels see
    // them.
    ASSERT_EQ(cpu.captures.size(), layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const LayerCapture& g = gpu.captures[0][i];
      const LayerCapture& r = cpu.captures[i];
      ASSERT_EQ(g.q.size(), r.q.size());
      ASSERT_EQ(g.k.size(), r.k.size());
      const bool llama = m.config.architecture == "llama";
      const int d = m.config.head_dim;
      const double eq = rel_l2(llama ? half_split(g.q, d) : g.q, r.q);
      const double ek = rel_l2(llama ? half_split(g.k, d) : g.k, r.k);
      const double ev = rel_l2(g.v, r.v);
      std::printf("  layer %d: rel L2 q %.2e, k %.2e, v %.2e\n", layers[i], eq, ek, ev);
      // Layer 0 sees the embeddings directly: 16-bit rounding only. Deeper layers add the drift
      // of the residual stream through 16-bit weights.
      const double bound = layers[i] == 0 ? 1e-2 : 6e-2;
      EXPECT_LE(eq, bound) << "layer " << layers[i]
                           << " (a large error at layer 0 points at the rotation pairs or the "
                              "Q/K row order)";
      EXPECT_LE(ek, bound) << "layer " << layers[i];
      EXPECT_LE(ev, bound) << "layer " << layers[i];
    }
  }
}

TEST_P(GpuEngine, ChunkedPrefillEqualsOneShot) {
  const Model& m = *model_;
  const std::vector<std::int32_t> tokens = head(m.tokens, GetParam().long_prompt);
  Engine whole = engine();
  // Chunks off every tile multiple, pages of 16: the history crosses many pages.
  Engine chunked = engine(16, 48);
  const ForwardResult a = whole.forward({tokens}, {.capture_layers = {}, .all_logits = true});
  const ForwardResult b = chunked.forward({tokens}, {.capture_layers = {}, .all_logits = true});
  const LogitComparison c = compare_logits(b.logits[0], a.logits[0], m.config.vocab);
  std::printf("%s: chunked vs one-shot: top-1 %.4f, max diff %.4f\n", GetParam().name,
              c.top1_agreement, c.max_abs_diff);
  // Chunks run other GEMM shapes (other bf16 roundings) over 30 (18) layers; measured on the
  // H200: SmolLM2 99.0%, max diff 0.66; Gemma 3 98.7%, 1.44 of 58.
  EXPECT_GE(c.top1_agreement, 0.98);
  EXPECT_LE(c.max_abs_diff, 0.05 * c.max_abs_ref);
}

// The single run's greedy tokens for `prompt`, and the margin between its best and second-best
// logits at each generated position (from a prefill over prompt + tokens).
struct Greedy {
  std::vector<std::int32_t> tokens;
  std::vector<float> margins;
};

Greedy greedy_with_margins(Engine& e, const std::vector<std::int32_t>& prompt, int new_tokens,
                           std::int32_t eos, std::size_t vocab) {
  Greedy g;
  g.tokens = e.generate({{prompt, new_tokens}}, eos).results[0].tokens;
  std::vector<std::int32_t> all = prompt;
  all.insert(all.end(), g.tokens.begin(), g.tokens.end() - 1);
  const ForwardResult f = e.forward({all}, {.capture_layers = {}, .all_logits = true});
  for (std::size_t j = 0; j < g.tokens.size(); ++j) {
    const auto row =
        f.logits[0].begin() + static_cast<std::ptrdiff_t>((prompt.size() - 1 + j) * vocab);
    std::vector<float> r(row, row + static_cast<std::ptrdiff_t>(vocab));
    std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
    g.margins.push_back(r[0] - r[1]);
  }
  return g;
}

// a equals b, except that they may part at a position where the reference's two best logits
// were within `tie` (rounding then decides).
void expect_same_greedy(const std::vector<std::int32_t>& got, const Greedy& ref, float tie,
                        const std::string& what) {
  for (std::size_t j = 0; j < std::min(got.size(), ref.tokens.size()); ++j) {
    if (got[j] == ref.tokens[j]) continue;
    EXPECT_LT(ref.margins[j], tie) << what << ": token " << j << " differs (" << got[j] << " vs "
                                   << ref.tokens[j] << ") where the choice was clear";
    return;
  }
  EXPECT_EQ(got.size(), ref.tokens.size()) << what;
}

TEST_P(GpuEngine, RaggedBatchEqualsSingleRuns) {
  const Model& m = *model_;
  const std::size_t vocab = static_cast<std::size_t>(m.config.vocab);
  const std::vector<std::vector<std::int32_t>> prompts = {
      head(m.tokens, 37), head(m.tokens, GetParam().long_prompt, 50), head(m.tokens, 91, 400)};
  const std::vector<int> new_tokens = {12, 16, 8};
  Engine e = engine(32);
  std::vector<GenerationRequest> batch;
  for (std::size_t i = 0; i < prompts.size(); ++i) batch.push_back({prompts[i], new_tokens[i]});
  const GenerationReport report = e.generate(batch, -1);  // no EOS: every request runs its length
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const GenerationResult& r = report.results[i];
    EXPECT_EQ(r.tokens.size(), static_cast<std::size_t>(new_tokens[i]));
    EXPECT_GT(r.ttft_ms, 0.0);
    EXPECT_GE(r.last_token_ms, r.ttft_ms);
    // The single run decodes with the decode kernel; its margins come from a prefill over the same
    // tokens, so this also checks decode against prefill.
    const Greedy single = greedy_with_margins(e, prompts[i], new_tokens[i], -1, vocab);
    expect_same_greedy(r.tokens, single, 0.05f, "request " + std::to_string(i));
  }
  EXPECT_GT(report.peak_device_used_bytes, e.device_bytes_peak() / 2);
}

TEST_P(GpuEngine, SkipEngineWithAnUnreachableTableGeneratesTheDenseText) {
  const Model& m = *model_;
  const std::vector<std::int32_t> prompt = head(m.tokens, GetParam().long_prompt);
  // First bin far above prompt + new tokens: every step runs the dense kernels (the dispatch: no
  // KV length reaches the first skippable length), chunked prefill included.
  const Threshold unreachable = Threshold::table(ScaleTable({{4096, 1000.0}}));
  Engine dense = engine(64, 128);
  Engine skip = engine(64, 128, unreachable, true);
  const GenerationReport a = dense.generate({{prompt, 24}}, m.eos);
  const GenerationReport b = skip.generate({{prompt, 24}}, m.eos);
  EXPECT_EQ(a.results[0].tokens, b.results[0].tokens);
  EXPECT_EQ(a.results[0].tiles.prefill.visited, 0u);  // the dense kernels keep no statistics
  EXPECT_EQ(b.results[0].tiles.prefill.visited, 0u);  // dense kernels: no statistics
  EXPECT_EQ(b.results[0].tiles.decode.visited, 0u);
  EXPECT_GT(b.attention_ms.prefill, 0.0);
  EXPECT_GT(b.attention_ms.decode, 0.0);
  EXPECT_EQ(a.attention_ms.prefill + a.attention_ms.decode, 0.0);
}

// The log-probabilities computed on the device equal the log-softmax of the logits the engine
// returns, for whole and chunked prompts (a chunk's last token is scored, a prompt's is not).
TEST_P(GpuEngine, TargetLogprobsMatchTheLogits) {
  const Model& m = *model_;
  const std::vector<std::vector<std::int32_t>> prompts = {head(m.tokens, 300), head(m.tokens, 77)};
  for (int chunk : {0, 128}) {
    Engine e = engine(64, chunk);
    ForwardOptions all;
    all.all_logits = true;
    const ForwardResult logits = e.forward(prompts, all);
    ForwardOptions scored;
    scored.target_logprobs = true;
    const ForwardResult lp = e.forward(prompts, scored);
    const std::size_t vocab = static_cast<std::size_t>(m.config.vocab);
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      ASSERT_EQ(lp.logprobs[p].size(), prompts[p].size() - 1);
      double worst = 0.0;
      for (std::size_t i = 0; i + 1 < prompts[p].size(); ++i) {
        const float* row = logits.logits[p].data() + i * vocab;
        const double mx = *std::max_element(row, row + vocab);
        double sum = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - mx);
        const double expected = row[prompts[p][i + 1]] - mx - std::log(sum);
        worst = std::max(worst, std::abs(expected - lp.logprobs[p][i]));
      }
      EXPECT_LT(worst, 2e-3) << "prompt " << p << ", chunk " << chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GpuEngine, ::testing::ValuesIn(kCheckpoints),
                         [](const auto& p) { return std::string(p.param.name); });

// The tool as a user runs it on SmolLM2: a checkpoint directory (the GGUF linked, config.json) in
// a fresh directory per test.
class GpuEngineTool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine";
    const char* path = std::getenv("SKIPSOFTMAX_SMOLLM2_GGUF");
    if (!path || !fs::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
    dir_ = fs::temp_directory_path() / ("skipsoftmax_tool_" + std::to_string(getpid()));
    fs::create_directories(ckpt());
    fs::create_symlink(fs::absolute(path), ckpt() / "model.gguf");
    write_config("{}");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path ckpt() const { return dir_ / "ckpt"; }
  void write_config(const std::string& text) const {
    std::ofstream(ckpt() / "config.json") << text;
  }
  // The tool's exit status (output discarded).
  int tool(const std::string& args) const {
    const fs::path exe =
        fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "skipsoftmax";
    const int status = std::system((exe.string() + " " + args + " > /dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  fs::path dir_;
};

// skipsoftmax export + run on SmolLM2, as a user runs them, then the engine config edited.
TEST_F(GpuEngineTool, ExportRunAndRetarget) {
  const fs::path& dir = dir_;
  std::ofstream(dir / "in.json")
      << R"(["The capital of France is", {"prompt": "Once upon a time", "max_new_tokens": 5,
                                           "id": "story"}])";
  ASSERT_EQ(tool("export " + ckpt().string() + " " + (dir / "engine").string()), 0);
  const std::string run = "run --engine-dir " + (dir / "engine").string() + " --input-file " +
                          (dir / "in.json").string() + " --max-new-tokens 8 --output-file ";
  ASSERT_EQ(tool(run + (dir / "dense.json").string() + " --time-attention"), 0);
  const json out = read_json_file(dir / "dense.json");
  ASSERT_EQ(out.at("requests").size(), 2u);
  EXPECT_EQ(out.at("requests")[0].at("generated_tokens"), 8);
  EXPECT_FALSE(out.at("requests")[0].at("text").get<std::string>().empty());
  EXPECT_EQ(out.at("requests")[1].at("id"), "story");
  EXPECT_LE(out.at("requests")[1].at("generated_tokens").get<int>(), 5);
  EXPECT_GT(out.at("totals").at("peak_device_memory_bytes").get<double>(), 0.0);
  EXPECT_GT(out.at("totals").at("attention_share").get<double>(), 0.0);
  EXPECT_EQ(out.at("thresholds").at("decode"), "dense");

  // A flat decode lambda edited into the engine config takes effect at the next launch.
  json config = read_json_file(dir / "engine" / "config.json");
  config["skip_softmax_decode_threshold"] = 0.5;
  std::ofstream(dir / "engine" / "config.json") << config.dump();
  ASSERT_EQ(tool(run + (dir / "skip.json").string()), 0);
  const json skip = read_json_file(dir / "skip.json");
  EXPECT_EQ(skip.at("thresholds").at("decode"), Threshold::flat(0.5).describe());
  EXPECT_GT(skip.at("requests")[0].at("attention_tiles").at("decode").at("visited").get<int>(), 0);
}

// skipsoftmax evaluate on SmolLM2: a dense baseline, the same engine gated against it (drop 0:
// passes), and an engine skipping at a flat lambda of 0.5 (every tile whose scores sit 0.7 below
// the running maximum) gated with no slack: its perplexity rises, so the gate fails with exit 2.
TEST_F(GpuEngineTool, EvaluateAndGate) {
  const fs::path& dir = dir_;
  const std::string model_dir = ckpt().string();
  ASSERT_EQ(tool("export " + model_dir + " " + (dir / "dense").string()), 0);
  ASSERT_EQ(tool("export " + model_dir + " " + (dir / "flat").string() +
                 " --skip-softmax-prefill-threshold 0.5 --skip-softmax-decode-threshold 0.5"),
            0);
  const auto evaluate = [&](const std::string& engine, const std::string& extra) {
    return tool("evaluate --model-dir " + model_dir + " --engine-dir " + (dir / engine).string() +
                " --max-context 2048 --lengths 1024 2048 --samples 2 --text-windows 1 " + extra);
  };
  // An engine without tables is evaluated as the dense arm (--arm both would be refused).
  ASSERT_EQ(evaluate("dense", "--arm dense --save-results " + (dir / "dense.json").string()), 0);
  const EvalResults dense = read_evaluation_file(dir / "dense.json");
  ASSERT_EQ(dense.results.size(), 2u);
  EXPECT_EQ(dense.results[1].scores.size(), 4u);
  EXPECT_GT(dense.results[1].perplexity, 1.0);
  EXPECT_LT(dense.results[1].perplexity, 100.0);  // English text to a trained model
  EXPECT_EQ(dense.results[1].perplexity_tokens, 2047);
  EXPECT_EQ(dense.results[1].tiles.prefill.visited, 0u);  // dense kernels keep no statistics

  const std::string gate = "--baseline " + (dir / "dense.json").string() + " --save-results ";
  ASSERT_EQ(
      evaluate("dense", "--arm dense " + gate + (dir / "again.json").string() + " --max-drop 0"),
      0);
  EXPECT_TRUE(read_evaluation_file(dir / "again.json").gate->pass);
  EXPECT_EQ(evaluate("flat", gate + (dir / "flat.json").string() + " --max-drop 0"), 2);
  const EvalResults flat = read_evaluation_file(dir / "flat.json");
  ASSERT_TRUE(flat.gate);
  EXPECT_FALSE(flat.gate->pass);
  EXPECT_GT(flat.results[1].tiles.prefill.skipped, 0u);
  EXPECT_GT(flat.results[1].perplexity, dense.results[1].perplexity);
  // The arm attributes a phase: decode alone leaves the prefill (and so the perplexity) dense.
  ASSERT_EQ(evaluate("flat", "--arm decode --save-results " + (dir / "decode.json").string()), 0);
  const EvalResults decode = read_evaluation_file(dir / "decode.json");
  EXPECT_EQ(decode.results[1].tiles.prefill.visited, 0u);
  EXPECT_GT(decode.results[1].tiles.decode.visited, 0u);
  EXPECT_DOUBLE_EQ(decode.results[1].perplexity, dense.results[1].perplexity);
}

// skipsoftmax price on SmolLM2 with a hand-written ladder: price.json valid, the dense arm and the
// tier measured at every length, each arm's evaluation written, and the summary recorded in the
// checkpoint config with the other keys kept.
TEST_F(GpuEngineTool, PriceListOfACalibratedCheckpoint) {
  const fs::path& dir = dir_;
  write_config(R"({
    "model_type": "llama",
    "skip_softmax_prefill_scale_tables": {"50%": [[1024, 50.0]], "75%": [[1024, 200.0]]},
    "skip_softmax_prefill_target_sparsity": "75%",
    "skip_softmax_prefill_shape_advice": {"verdict": "ON", "sparsity": 0.75, "mass_share": 0.05,
                                          "mass_ratio": 0.0667, "mass_ratio_limit": 0.3},
    "skip_softmax_decode_scale_tables": {"75%": [[1024, 200.0]]},
    "skip_softmax_decode_shape_advice": {"verdict": "ON", "sparsity": 0.75, "mass_share": 0.05,
                                         "mass_ratio": 0.0667, "mass_ratio_limit": 0.3}})");
  ASSERT_EQ(tool("price --model-dir " + ckpt().string() + " --work-dir " + (dir / "work").string() +
                 " --lengths 1024 2048 --accuracy-lengths 2048 --tiers 75% --samples 2"
                 " --text-windows 1 --repeats 2 --decode-tokens 8"),
            0);
  const PriceList p = read_price_file(dir / "work" / "price.json");
  ASSERT_EQ(p.arms.size(), 2u);
  EXPECT_TRUE(p.arms[0].dense());
  EXPECT_EQ(p.arms[1].skip, SkipScope::kBoth);
  EXPECT_EQ(p.arms[1].tier, "75%");
  ASSERT_EQ(p.arms[1].points.size(), 2u);
  const PricePoint& at2k = p.arms[1].points[1];
  EXPECT_GT(at2k.phases.prefill.tile_sparsity, 0.0);
  EXPECT_GT(at2k.phases.decode.tile_sparsity, 0.0);
  EXPECT_GT(at2k.phases.prefill.attention_share, 0.0);
  EXPECT_LT(at2k.phases.prefill.attention_share, 1.0);
  ASSERT_TRUE(at2k.accuracy);
  EXPECT_EQ(at2k.accuracy->scores.size(), 4u);
  EXPECT_FALSE(p.arms[1].points[0].accuracy);
  EXPECT_EQ(p.recommendations.size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "work" / "evaluate_dense.json"));
  EXPECT_EQ(read_evaluation_file(dir / "work" / "evaluate_75pct.json").results.size(), 1u);
  const json config = read_json_file(dir / "ckpt" / "config.json");
  EXPECT_EQ(config.at("model_type"), "llama");
  EXPECT_EQ(config.at("skip_softmax_price_list").at("arms").size(), 2u);
  EXPECT_TRUE(config.contains("skip_softmax_prefill_scale_tables"));
}

}  // namespace
}  // namespace skipsoftmax
