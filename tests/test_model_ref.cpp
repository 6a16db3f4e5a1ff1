// The CPU reference forward pass against transformers on the real checkpoints (fixtures from
// scripts/reference_logits.py in tests/data), its layer-0 Q/K/V against a direct recomputation
// from the GGUF tensors in llama.cpp's conventions, and its argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_io.h"
#include "gguf.h"
#include "model_config.h"
#include "model_ref.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

// The checkpoint named by `env`, or nullptr when the variable is unset or the file is missing.
const char* checkpoint(const char* env) {
  const char* path = std::getenv(env);
  return path && fs::exists(path) ? path : nullptr;
}

// How cpu_forward's logits compare with the fixture's.
struct Agreement {
  int positions = 0;
  int top1_equal = 0;
  int top1_differ_beyond_tie = 0;  // different argmax where the reference's top-2 gap > tie
  double top10_max_abs = 0.0;      // over the stored top-10 logits
  double top10_max_rel = 0.0;      // the same, over the position's largest |logit|
  double norm_max_rel = 0.0;       // relative error of the logits' L2 norm
};

Agreement compare_logits(const std::vector<float>& logits, int vocab, const json& fx, double tie) {
  Agreement a;
  const auto argmax = fx["argmax"].get<std::vector<int>>();
  const auto gap = fx["top2_gap"].get<std::vector<double>>();
  const auto norm = fx["l2_norm"].get<std::vector<double>>();
  a.positions = static_cast<int>(argmax.size());
  for (int p = 0; p < a.positions; ++p) {
    const float* z = logits.data() + std::int64_t{p} * vocab;
    const int best = static_cast<int>(std::max_element(z, z + vocab) - z);
    a.top1_equal += best == argmax[idx(p)];
    a.top1_differ_beyond_tie += best != argmax[idx(p)] && gap[idx(p)] > tie;
    double ss = 0.0;
    for (int v = 0; v < vocab; ++v) ss += double(z[v]) * z[v];
    a.norm_max_rel =
        std::max(a.norm_max_rel, std::abs(std::sqrt(ss) - norm[idx(p)]) / norm[idx(p)]);
  }
  for (const json& t : fx["top10"]) {
    const int p = t["position"];
    const auto ids = t["ids"].get<std::vector<int>>();
    const auto ref = t["logits"].get<std::vector<double>>();
    const float* z = logits.data() + std::int64_t{p} * vocab;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const double d = std::abs(z[ids[i]] - ref[i]);
      a.top10_max_abs = std::max(a.top10_max_abs, d);
      a.top10_max_rel = std::max(a.top10_max_rel, d / std::abs(ref[0]));
    }
  }
  return a;
}

// Largest |captured - reference| over the fixture's Q/K positions, relative to the largest
// reference value of each position; `x` is [tokens, heads, head_dim].
double capture_error(const std::vector<float>& x, int heads, int head_dim, const json& ref,
                     const std::vector<int>& positions) {
  double worst = 0.0;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const auto r = ref[i].get<std::vector<std::vector<double>>>();  // [heads][head_dim]
    EXPECT_EQ(static_cast<int>(r.size()), heads);
    double scale = 0.0, err = 0.0;
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        const double got = x[idx((std::int64_t{positions[i]} * heads + h) * head_dim + d)];
        scale = std::max(scale, std::abs(r[idx(h)][idx(d)]));
        err = std::max(err, std::abs(got - r[idx(h)][idx(d)]));
      }
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

// Runs the fixture's prompt and checks logits and captures against it. Measured (2 threads):
// SmolLM2 (256 tokens): top-1 256/256, top-10 logits max |diff| 4.9e-5 (2e-6 of the top logit),
// logits' L2 norm 1.6e-4 relative (position 3, where transformers' float32 itself is 5e-5 off a
// float64 run; 3e-5 elsewhere), Q/K 3e-6. Gemma 3 (540 tokens): top-1 540/540, top-10 4.8e-5
// (2e-6), norm 4e-6, Q/K 1.6e-5. A sliding window one key too wide or narrow moves Gemma's
// top-10 logits past position 512 by 9e-3 (6e-4 of the top logit): the bound catches it.
void check_against_transformers(const char* path, const std::string& fixture) {
  const gguf::File file = gguf::File::open(path);
  const ModelConfig config = read_model_config(file);
  const json fx = read_json_file(fs::path(SKIPSOFTMAX_TEST_DATA) / fixture);
  ASSERT_EQ(fx["gguf"].get<std::string>(), fs::path(path).filename().string());
  const auto tokens = fx["tokens"].get<std::vector<std::int32_t>>();
  const int layer = fx["capture"]["layer"];
  CpuForwardOptions opt;
  opt.all_logits = true;
  opt.capture_layers = {layer};
  const CpuForwardResult r = cpu_forward(file, config, tokens, opt);
  ASSERT_EQ(r.logits.size(), tokens.size() * idx(config.vocab));

  // A tie: both implementations' top two within float rounding of each other.
  const Agreement a = compare_logits(r.logits, config.vocab, fx, 1e-2);
  ::testing::Test::RecordProperty("positions", a.positions);
  ::testing::Test::RecordProperty("top1_equal", a.top1_equal);
  ::testing::Test::RecordProperty("top10_max_abs", std::to_string(a.top10_max_abs));
  ::testing::Test::RecordProperty("top10_max_rel", std::to_string(a.top10_max_rel));
  ::testing::Test::RecordProperty("norm_max_rel", std::to_string(a.norm_max_rel));
  EXPECT_GE(a.top1_equal, 0.99 * a.positions);
  EXPECT_EQ(a.top1_differ_beyond_tie, 0);
  EXPECT_LT(a.top10_max_rel, 1e-4) << "max abs " << a.top10_max_abs;
  EXPECT_LT(a.norm_max_rel, 1e-3);

  ASSERT_EQ(r.captures.size(), 1u);
  const LayerCapture& c = r.captures[0];
  EXPECT_EQ(c.layer, layer);
  const auto positions = fx["capture"]["positions"].get<std::vector<int>>();
  const double q_err =
      capture_error(c.q, config.heads_q, config.head_dim, fx["capture"]["q"], positions);
  const double k_err =
      capture_error(c.k, config.heads_kv, config.head_dim, fx["capture"]["k"], positions);
  ::testing::Test::RecordProperty("q_max_rel", std::to_string(q_err));
  ::testing::Test::RecordProperty("k_max_rel", std::to_string(k_err));
  EXPECT_LT(q_err, 1e-4);
  EXPECT_LT(k_err, 1e-4);
}

TEST(ModelRefSmolLM2, MatchesTransformers) {
  const char* path = checkpoint("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  check_against_transformers(path, "smollm2_reference_logits.json");
}

// 540 tokens: the positions past 512 see the local layers' sliding window.
TEST(ModelRefGemma3, MatchesTransformers) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  check_against_transformers(path, "gemma3_reference_logits.json");
}

// ---- Layer 0 recomputed from the tensors --------------------------------------------------------

// Row `row` of a [rows, cols] tensor, dequantized from the file alone.
std::vector<float> read_row(const gguf::File& f, const std::string& path, const std::string& name,
                            std::int64_t row) {
  const gguf::TensorInfo& t = f.tensor(name);
  const std::int64_t cols = t.dims[0];
  const std::int64_t bytes = cols / gguf::block_values(t.type) * gguf::block_bytes(t.type);
  std::vector<std::uint8_t> raw(idx(bytes));
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.offset + idx(row * bytes)));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
  std::vector<float> out(idx(cols));
  gguf::dequantize(t.type, raw.data(), out.data(), cols);
  return out;
}

void rms_norm(std::vector<float>& x, int offset, int dim, const std::vector<float>& w, double eps) {
  double ss = 0.0;
  for (int i = 0; i < dim; ++i) ss += double(x[idx(offset + i)]) * x[idx(offset + i)];
  const double inv = 1.0 / std::sqrt(ss / dim + eps);
  for (int i = 0; i < dim; ++i) {
    x[idx(offset + i)] = static_cast<float>(x[idx(offset + i)] * inv * w[idx(i)]);
  }
}

// W [rows, cols] . x.
std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x) {
  const std::size_t cols = x.size(), rows = w.size() / cols;
  std::vector<float> y(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (std::size_t c = 0; c < cols; ++c) acc += double(w[r * cols + c]) * x[c];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

// Layer 0's Q, K, V of `tokens` as llama.cpp computes them: embedding (x sqrt(hidden) for
// Gemma), RMSNorm, projection, Gemma's per-head q/k norm, then RoPE. Llama files store Q/K rows
// with the rotary pairs adjacent, (2i, 2i+1), and llama.cpp rotates those pairs ("normal" RoPE);
// the result is returned in cpu_forward's half-split order (pair i at i and i + d/2). Gemma
// files rotate the half-split pairs directly ("neox" RoPE).
LayerCapture recompute_layer0(const gguf::File& f, const std::string& path, const ModelConfig& c,
                              const std::vector<std::int32_t>& tokens) {
  const bool gemma = c.architecture == "gemma3";
  const int d = c.head_dim;
  const std::vector<float> norm = f.read_floats(f.tensor("blk.0.attn_norm.weight"));
  const std::vector<float> wq = f.read_floats(f.tensor("blk.0.attn_q.weight"));
  const std::vector<float> wk = f.read_floats(f.tensor("blk.0.attn_k.weight"));
  const std::vector<float> wv = f.read_floats(f.tensor("blk.0.attn_v.weight"));
  const double base = gemma ? c.rope_base_local : c.rope_base;  // Gemma's layer 0 is local
  LayerCapture out;
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    std::vector<float> x = read_row(f, path, "token_embd.weight", tokens[p]);
    if (gemma) {
      for (float& v : x) v *= static_cast<float>(std::sqrt(double(c.hidden)));
    }
    rms_norm(x, 0, c.hidden, norm, c.rms_eps);
    std::vector<float> q = matvec(wq, x), k = matvec(wk, x);
    const std::vector<float> v = matvec(wv, x);
    if (gemma) {
      const std::vector<float> qn = f.read_floats(f.tensor("blk.0.attn_q_norm.weight"));
      const std::vector<float> kn = f.read_floats(f.tensor("blk.0.attn_k_norm.weight"));
      for (int h = 0; h < c.heads_q; ++h) rms_norm(q, h * d, d, qn, c.rms_eps);
      for (int h = 0; h < c.heads_kv; ++h) rms_norm(k, h * d, d, kn, c.rms_eps);
    }
    auto rotate = [&](std::vector<float>& y, int heads, std::vector<float>& dst) {
      for (int h = 0; h < heads; ++h) {
        const float* s = y.data() + h * d;
        std::vector<float> r(idx(d));
        for (int i = 0; i < d / 2; ++i) {
          const double angle = double(p) * std::pow(base, -2.0 * i / d);
          // The pair's two members: adjacent in a llama file, half a head apart in Gemma's.
          const double a = gemma ? s[i] : s[2 * i], b = gemma ? s[i + d / 2] : s[2 * i + 1];
          r[idx(i)] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
          r[idx(i + d / 2)] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
        }
        dst.insert(dst.end(), r.begin(), r.end());
      }
    };
    rotate(q, c.heads_q, out.q);
    rotate(k, c.heads_kv, out.k);
    out.v.insert(out.v.end(), v.begin(), v.end());
  }
  return out;
}

void check_layer0(const char* path, bool check_threads) {
  const gguf::File file = gguf::File::open(path);
  const ModelConfig c = read_model_config(file);
  // A few tokens spread over the vocabulary, at positions whose rotation is far from identity.
  const std::vector<std::int32_t> tokens = {2, 100, 5000, 17, c.vocab - 1, 321, 4096, 40};
  CpuForwardOptions opt;
  opt.capture_layers = {c.layers - 1, 0};
  const CpuForwardResult r = cpu_forward(file, c, tokens, opt);
  EXPECT_EQ(r.logits.size(), idx(c.vocab));  // the last token's only
  ASSERT_EQ(r.captures.size(), 2u);          // in layer order
  EXPECT_EQ(r.captures[0].layer, 0);
  EXPECT_EQ(r.captures[1].layer, c.layers - 1);
  const std::size_t n = tokens.size();
  for (const LayerCapture& cap : r.captures) {
    EXPECT_EQ(cap.q.size(), n * idx(c.heads_q) * idx(c.head_dim));
    EXPECT_EQ(cap.k.size(), n * idx(c.heads_kv) * idx(c.head_dim));
    EXPECT_EQ(cap.v.size(), n * idx(c.heads_kv) * idx(c.head_dim));
  }
  const LayerCapture want = recompute_layer0(file, path, c, tokens);
  const LayerCapture& got = r.captures[0];
  auto max_rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double err = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, double(std::abs(a[i] - b[i])));
      scale = std::max(scale, double(std::abs(b[i])));
    }
    return err / scale;
  };
  ASSERT_EQ(got.q.size(), want.q.size());
  ASSERT_EQ(got.k.size(), want.k.size());
  ASSERT_EQ(got.v.size(), want.v.size());
  EXPECT_LT(max_rel(got.q, want.q), 1e-5);
  EXPECT_LT(max_rel(got.k, want.k), 1e-5);
  EXPECT_LT(max_rel(got.v, want.v), 1e-5);

  if (check_threads) {  // every output is summed in a fixed order: the thread count is invisible
    opt.num_threads = 1;
    const CpuForwardResult one = cpu_forward(file, c, tokens, opt);
    EXPECT_EQ(one.logits, r.logits);
    EXPECT_EQ(one.captures[1].q, r.captures[1].q);
  }
}

TEST(ModelRefSmolLM2, Layer0QkvEqualARecomputation) {
  const char* path = checkpoint("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  check_layer0(path, true);
}

TEST(ModelRefGemma3, Layer0QkvEqualARecomputation) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  check_layer0(path, false);
}

// ---- Argument checks ----------------------------------------------------------------------------

class ModelRefArguments : public test::TempDirTest {
 protected:
  // A GGUF file with no metadata and no tensors, and a small llama configuration.
  void SetUp() override {
    TempDirTest::SetUp();
    const std::uint32_t header[] = {0x46554747, 3, 0, 0, 0, 0};  // magic, version, 0 tensors, 0 kv
    std::ofstream(dir_ / "empty.gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(header), sizeof header);
    config_.architecture = "llama";
    config_.layers = 2;
    config_.hidden = 8;
    config_.ffn = 16;
    config_.heads_q = 2;
    config_.heads_kv = 1;
    config_.head_dim = 4;
    config_.vocab = 10;
    config_.local_layer.assign(2, false);
  }
  ModelConfig config_;
};

TEST_F(ModelRefArguments, RejectsTokenIdsOutOfRange) {
  const gguf::File f = gguf::File::open(dir_ / "empty.gguf");
  const std::vector<std::int32_t> high = {1, 10}, negative = {-1};
  EXPECT_ERROR_HAS(cpu_forward(f, config_, high, {}), "token id 10 at position 1 is out of range");
  EXPECT_ERROR_HAS(cpu_forward(f, config_, negative, {}), "token id -1 at position 0");
  EXPECT_ERROR_HAS(cpu_forward(f, config_, std::vector<std::int32_t>{}, {}), "no tokens");
}

TEST_F(ModelRefArguments, RejectsBadCaptureLayersAndMissingTensors) {
  const gguf::File f = gguf::File::open(dir_ / "empty.gguf");
  const std::vector<std::int32_t> tokens = {1, 2};
  CpuForwardOptions opt;
  opt.capture_layers = {2};
  EXPECT_ERROR_HAS(cpu_forward(f, config_, tokens, opt), "capture layer 2 is out of range");
  EXPECT_ERROR_HAS(cpu_forward(f, config_, tokens, {}), "no tensor token_embd.weight");
  config_.architecture = "mamba";
  EXPECT_ERROR_HAS(cpu_forward(f, config_, tokens, {}), "'mamba' is not supported");
}

}  // namespace
}  // namespace skipsoftmax
