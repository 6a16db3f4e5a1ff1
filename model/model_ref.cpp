// The CPU reference forward pass. Conventions of llama.cpp's GGUF files that this relies on
// (checked against transformers' GGUF loader, scripts/reference_logits.py):
// - Weights are [out, in] row-major (GGUF dims[0] = in is the contiguous one).
// - Llama: convert_hf_to_gguf.py permutes the rows of attn_q / attn_k inside each head so that
//   the rotary pairs are adjacent, (2i, 2i+1), as in Meta's original layout; llama.cpp rotates
//   them with its "normal" RoPE. transformers undoes the permutation when it loads the file and
//   rotates the half-split pairs (i, i + d/2). We undo it too, right after the projection, so the
//   captured Q/K are in transformers' layout. Scores are the same either way (the same
//   permutation of head_dim on Q and K), but one layout for every family keeps the engine simple.
// - Gemma 3: the file is in transformers' layout (half-split RoPE, no permutation), and the
//   converter has already added 1 to every RMSNorm weight (Gemma computes x * (1 + w)), so all
//   norms multiply by the stored weight.
#include "model_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "parallel.h"

namespace skipsoftmax {
namespace {

using gguf::TensorInfo;

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

// ---- Linear layers ----------------------------------------------------------------------------

// A weight matrix [rows = out features, cols = in features] kept in its GGUF encoding; the
// product dequantizes each row exactly once.
struct Matrix {
  const TensorInfo* info = nullptr;
  std::vector<std::uint8_t> raw;
  int rows = 0;
  int cols = 0;
  std::int64_t row_bytes = 0;
};

Matrix load_matrix(const gguf::File& f, const std::string& name, int rows, int cols) {
  const TensorInfo& t = f.tensor(name);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
    std::string got;
    for (std::int64_t d : t.dims) got += (got.empty() ? "" : " x ") + std::to_string(d);
    throw std::runtime_error(name + " has dims [" + got + "], expected [" + std::to_string(cols) +
                             " x " + std::to_string(rows) + "]");
  }
  Matrix m;
  m.info = &t;
  m.raw = f.read_bytes(t);
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = cols / gguf::block_values(t.type) * gguf::block_bytes(t.type);
  return m;
}

std::vector<float> load_vector(const gguf::File& f, const std::string& name, int size) {
  const TensorInfo& t = f.tensor(name);
  if (t.elements() != size) {
    throw std::runtime_error(name + " has " + std::to_string(t.elements()) + " values, expected " +
                             std::to_string(size));
  }
  return f.read_floats(t);
}

constexpr int kPanel = 16;       // output features per panel: two AVX2 vectors of float
constexpr int kTokenTile = 4;    // tokens per register tile (4 x 16 accumulators)
constexpr int kRowsPerJob = 64;  // rows of W one job dequantizes, a multiple of kPanel

// Eight floats: one AVX2 register, two SSE ones.
using Vec8 = float __attribute__((vector_size(8 * sizeof(float))));

// y[t][0..cols) = x[t] . wt[.][0..cols) for t < tokens, where wt is a panel of W transposed,
// [k][kPanel]. Each output is summed in order of k with separate multiplies and adds (the avx2
// target has no FMA to contract them into), so both clones give the same bits.
__attribute__((target_clones("avx2", "default"))) void panel_product(const float* x, int tokens,
                                                                     int k, const float* wt,
                                                                     float* y, int ldy, int cols) {
  static_assert(kPanel == 16, "a panel row is two Vec8");
  for (int t = 0; t < tokens; t += kTokenTile) {
    const int n = std::min(kTokenTile, tokens - t);
    Vec8 acc[kTokenTile][2] = {};
    const float* xt[kTokenTile];
    // Rows past the last token repeat it; their sums are not stored.
    for (int i = 0; i < kTokenTile; ++i) {
      xt[i] = x + static_cast<std::ptrdiff_t>(t + std::min(i, n - 1)) * k;
    }
    for (int kk = 0; kk < k; ++kk) {
      Vec8 w0, w1;
      std::memcpy(&w0, wt + static_cast<std::ptrdiff_t>(kk) * kPanel, sizeof w0);
      std::memcpy(&w1, wt + static_cast<std::ptrdiff_t>(kk) * kPanel + 8, sizeof w1);
      for (int i = 0; i < kTokenTile; ++i) {
        acc[i][0] += xt[i][kk] * w0;
        acc[i][1] += xt[i][kk] * w1;
      }
    }
    for (int i = 0; i < n; ++i) {
      float out[kPanel];
      std::memcpy(out, &acc[i][0], sizeof acc[i][0]);
      std::memcpy(out + 8, &acc[i][1], sizeof acc[i][1]);
      std::memcpy(y + static_cast<std::ptrdiff_t>(t + i) * ldy, out, sizeof(float) * idx(cols));
    }
  }
}

// y [tokens, w.rows] = x [tokens, w.cols] . W^T.
std::vector<float> linear(const Matrix& w, const std::vector<float>& x, int tokens, int threads) {
  std::vector<float> y(idx(std::int64_t{tokens} * w.rows));
  const int k = w.cols;
  const int jobs = (w.rows + kRowsPerJob - 1) / kRowsPerJob;
  threads = std::max(1, std::min(threads, jobs));
  std::vector<std::vector<float>> rows(idx(threads)), panels(idx(threads));
  parallel_for(jobs, threads, [&](std::int64_t job, int tid) {
    const int r0 = static_cast<int>(job) * kRowsPerJob;
    const int n = std::min(kRowsPerJob, w.rows - r0);
    std::vector<float>& buf = rows[idx(tid)];
    std::vector<float>& wt = panels[idx(tid)];
    buf.resize(idx(std::int64_t{kRowsPerJob} * k));
    wt.resize(idx(std::int64_t{k} * kPanel));
    gguf::dequantize(w.info->type, w.raw.data() + r0 * w.row_bytes, buf.data(),
                     std::int64_t{n} * k);
    for (int p0 = 0; p0 < n; p0 += kPanel) {
      const int cols = std::min(kPanel, n - p0);
      std::fill(wt.begin(), wt.end(), 0.f);
      for (int j = 0; j < cols; ++j) {
        const float* src = buf.data() + std::int64_t{p0 + j} * k;
        for (int kk = 0; kk < k; ++kk) wt[idx(std::int64_t{kk} * kPanel + j)] = src[kk];
      }
      panel_product(x.data(), tokens, k, wt.data(), y.data() + r0 + p0, w.rows, cols);
    }
  });
  return y;
}

// ---- Element-wise pieces ----------------------------------------------------------------------

// RMSNorm of each of `count` vectors of `dim` values in place: x * w / sqrt(mean(x^2) + eps).
void rms_norm(float* x, std::int64_t count, int dim, const std::vector<float>& w, double eps) {
  for (std::int64_t r = 0; r < count; ++r) {
    float* v = x + r * dim;
    double ss = 0.0;
    for (int i = 0; i < dim; ++i) ss += double(v[i]) * v[i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i) v[i] = static_cast<float>(v[i] * inv * w[idx(i)]);
  }
}

// llama.cpp's adjacent rotary pairs (2i, 2i+1) -> transformers' half-split (i, i + d/2), within
// each head (x is [.., d]).
void adjacent_to_half_split(std::vector<float>& x, int d) {
  std::vector<float> tmp(idx(d));
  for (std::size_t h = 0; h < x.size() / idx(d); ++h) {
    float* v = x.data() + h * idx(d);
    for (int i = 0; i < d / 2; ++i) {
      tmp[idx(i)] = v[2 * i];
      tmp[idx(i + d / 2)] = v[2 * i + 1];
    }
    std::copy(tmp.begin(), tmp.end(), v);
  }
}

// cos/sin of position p times the frequency of pair i: [tokens][d/2] each.
struct RopeTable {
  std::vector<double> cos, sin;
};

RopeTable rope_table(int tokens, int d, double base, double position_scale) {
  RopeTable t;
  t.cos.resize(idx(std::int64_t{tokens} * (d / 2)));
  t.sin.resize(t.cos.size());
  for (int p = 0; p < tokens; ++p) {
    for (int i = 0; i < d / 2; ++i) {
      const double angle = p * position_scale * std::pow(base, -2.0 * i / d);
      t.cos[idx(std::int64_t{p} * (d / 2) + i)] = std::cos(angle);
      t.sin[idx(std::int64_t{p} * (d / 2) + i)] = std::sin(angle);
    }
  }
  return t;
}

// Rotates the half-split pairs (i, i + d/2) of x [tokens][heads][d] by position.
void apply_rope(std::vector<float>& x, int tokens, int heads, int d, const RopeTable& t) {
  const int half = d / 2;
  for (int p = 0; p < tokens; ++p) {
    const double* c = t.cos.data() + std::int64_t{p} * half;
    const double* s = t.sin.data() + std::int64_t{p} * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x.data() + (std::int64_t{p} * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c[i] - b * s[i]);
        v[i + half] = static_cast<float>(b * c[i] + a * s[i]);
      }
    }
  }
}

float silu(float x) { return static_cast<float>(x / (1.0 + std::exp(-double(x)))); }

// GELU, tanh approximation (gelu_pytorch_tanh):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
float gelu_tanh(float x) {
  constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
  constexpr double kCubic = 0.044715;  // the approximation's fitted cubic coefficient
  const double xd = x;
  return static_cast<float>(0.5 * xd *
                            (1.0 + std::tanh(kSqrt2OverPi * (xd + kCubic * xd * xd * xd))));
}

// ---- Attention --------------------------------------------------------------------------------

struct AttentionShape {
  int tokens = 0, heads_q = 0, heads_kv = 0, d = 0;
  double scale = 0.0;
  int window = 0;        // keys a query sees, itself included; 0: all earlier keys
  double softcap = 0.0;  // scores -> softcap * tanh(scores / softcap); 0: none
};

// acc[j] = sum_e q[e] * kt[e][j] for j < n, summed in order of e.
__attribute__((target_clones("avx2", "default"))) void scores_row(const double* q, const double* kt,
                                                                  int d, std::int64_t stride, int n,
                                                                  double* acc) {
  for (int j = 0; j < n; ++j) acc[j] = 0.0;
  for (int e = 0; e < d; ++e) {
    const double qe = q[e];
    const double* krow = kt + e * stride;
    for (int j = 0; j < n; ++j) acc[j] += qe * krow[j];
  }
}

// o[e] = sum_j p[j] * v[j][e], summed in order of j.
__attribute__((target_clones("avx2", "default"))) void weighted_values(const double* p,
                                                                       const double* v, int n,
                                                                       int d, double* o) {
  for (int e = 0; e < d; ++e) o[e] = 0.0;
  for (int j = 0; j < n; ++j) {
    const double pj = p[j];
    const double* vrow = v + std::int64_t{j} * d;
    for (int e = 0; e < d; ++e) o[e] += pj * vrow[e];
  }
}

// Causal softmax attention with GQA, in double. q [T][Hq][d], k and v [T][Hkv][d] ->
// out [T][Hq][d].
std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const AttentionShape& s, int threads) {
  const int T = s.tokens, d = s.d, group = s.heads_q / s.heads_kv;
  // Per KV head: K transposed [d][T] and V [T][d], widened.
  std::vector<std::vector<double>> kt(idx(s.heads_kv)), vv(idx(s.heads_kv));
  for (int h = 0; h < s.heads_kv; ++h) {
    kt[idx(h)].resize(idx(std::int64_t{d} * T));
    vv[idx(h)].resize(idx(std::int64_t{d} * T));
    for (int t = 0; t < T; ++t) {
      const std::int64_t src = (std::int64_t{t} * s.heads_kv + h) * d;
      for (int e = 0; e < d; ++e) {
        kt[idx(h)][idx(std::int64_t{e} * T + t)] = k[idx(src + e)];
        vv[idx(h)][idx(std::int64_t{t} * d + e)] = v[idx(src + e)];
      }
    }
  }
  std::vector<float> out(idx(std::int64_t{T} * s.heads_q * d));
  constexpr int kQueryRowsPerJob = 16;
  const int row_blocks = (T + kQueryRowsPerJob - 1) / kQueryRowsPerJob;
  parallel_for(std::int64_t{row_blocks} * s.heads_q, threads, [&](std::int64_t job, int) {
    // Later row blocks are longer: hand them out first.
    const int block = row_blocks - 1 - static_cast<int>(job / s.heads_q);
    const int h = static_cast<int>(job % s.heads_q), hk = h / group;
    std::vector<double> qd(idx(d)), sc(idx(T)), o(idx(d));
    for (int i = block * kQueryRowsPerJob; i < std::min(T, (block + 1) * kQueryRowsPerJob); ++i) {
      const int lo = s.window > 0 ? std::max(0, i - s.window + 1) : 0;
      const int n = i - lo + 1;
      const float* qi = q.data() + (std::int64_t{i} * s.heads_q + h) * d;
      for (int e = 0; e < d; ++e) qd[idx(e)] = qi[e];
      scores_row(qd.data(), kt[idx(hk)].data() + lo, d, T, n, sc.data());
      double m = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n; ++j) {
        double x = sc[idx(j)] * s.scale;
        if (s.softcap > 0.0) x = s.softcap * std::tanh(x / s.softcap);
        sc[idx(j)] = x;
        m = std::max(m, x);
      }
      double sum = 0.0;
      for (int j = 0; j < n; ++j) {
        sc[idx(j)] = std::exp(sc[idx(j)] - m);
        sum += sc[idx(j)];
      }
      weighted_values(sc.data(), vv[idx(hk)].data() + std::int64_t{lo} * d, n, d, o.data());
      float* oi = out.data() + (std::int64_t{i} * s.heads_q + h) * d;
      for (int e = 0; e < d; ++e) oi[e] = static_cast<float>(o[idx(e)] / sum);
    }
  });
  return out;
}

// ---- The model --------------------------------------------------------------------------------

bool has_tensor(const gguf::File& f, const std::string& name) {
  return std::any_of(f.tensors().begin(), f.tensors().end(),
                     [&](const TensorInfo& t) { return t.name == name; });
}

double optional_number(const gguf::File& f, const std::string& key, double fallback) {
  return f.find(key) ? f.number(key) : fallback;
}

// Position multiplier of RoPE scaling ("linear" only; others are rejected).
double rope_position_scale(const gguf::File& f, const std::string& arch) {
  const std::string key = arch + ".rope.scaling.type";
  if (!f.find(key)) return 1.0;
  const std::string& type = f.string(key);
  if (type == "none") return 1.0;
  if (type != "linear") throw std::runtime_error(key + " = '" + type + "' is not supported");
  const double factor = f.number(arch + ".rope.scaling.factor");
  if (!(factor > 0.0)) throw std::runtime_error(arch + ".rope.scaling.factor must be positive");
  return 1.0 / factor;
}

}  // namespace

CpuForwardResult cpu_forward(const gguf::File& file, const ModelConfig& c,
                             std::span<const std::int32_t> tokens, const CpuForwardOptions& opt) {
  const bool gemma = c.architecture == "gemma3";
  if (!gemma && c.architecture != "llama") {
    throw std::runtime_error("cpu_forward: architecture '" + c.architecture +
                             "' is not supported (llama, gemma3)");
  }
  if (tokens.empty()) throw std::runtime_error("cpu_forward: no tokens");
  const int T = static_cast<int>(tokens.size());
  for (int i = 0; i < T; ++i) {
    if (tokens[idx(i)] < 0 || tokens[idx(i)] >= c.vocab) {
      throw std::runtime_error("cpu_forward: token id " + std::to_string(tokens[idx(i)]) +
                               " at position " + std::to_string(i) + " is out of range [0, " +
                               std::to_string(c.vocab) + ")");
    }
  }
  for (int l : opt.capture_layers) {
    if (l < 0 || l >= c.layers) {
      throw std::runtime_error("cpu_forward: capture layer " + std::to_string(l) +
                               " is out of range [0, " + std::to_string(c.layers) + ")");
    }
  }
  const int threads = opt.num_threads > 0
                          ? opt.num_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int H = c.hidden, D = c.head_dim, Hq = c.heads_q, Hkv = c.heads_kv;
  const std::string& arch = c.architecture;

  // Embedding: only the rows of the prompt's tokens are dequantized.
  const Matrix embd = load_matrix(file, "token_embd.weight", c.vocab, H);
  std::vector<float> x(idx(std::int64_t{T} * H));
  for (int i = 0; i < T; ++i) {
    gguf::dequantize(embd.info->type, embd.raw.data() + tokens[idx(i)] * embd.row_bytes,
                     x.data() + std::int64_t{i} * H, H);
  }
  if (gemma) {
    // Gemma scales the embedding by sqrt(hidden), rounded to the weights' dtype (float here).
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(H)));
    for (float& v : x) v *= scale;
  }

  const double position_scale = rope_position_scale(file, arch);
  const RopeTable rope_global = rope_table(T, D, c.rope_base, position_scale);
  // Gemma 3 scales only the global layers' positions; local layers use the plain base.
  const RopeTable rope_local = gemma ? rope_table(T, D, c.rope_base_local, 1.0) : RopeTable{};
  const double attn_softcap = optional_number(file, arch + ".attn_logit_softcapping", 0.0);
  const double final_softcap = optional_number(file, arch + ".final_logit_softcapping", 0.0);

  CpuForwardResult result;
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"}) {
      if (has_tensor(file, p + bias)) {
        throw std::runtime_error(p + bias + ": attention biases are not supported");
      }
    }
    // Attention block.
    std::vector<float> h = x;
    rms_norm(h.data(), T, H, load_vector(file, p + "attn_norm.weight", H), c.rms_eps);
    std::vector<float> q = linear(load_matrix(file, p + "attn_q.weight", Hq * D, H), h, T, threads);
    std::vector<float> k =
        linear(load_matrix(file, p + "attn_k.weight", Hkv * D, H), h, T, threads);
    std::vector<float> v =
        linear(load_matrix(file, p + "attn_v.weight", Hkv * D, H), h, T, threads);
    const bool local = gemma && c.is_local(l);
    if (gemma) {
      rms_norm(q.data(), std::int64_t{T} * Hq, D, load_vector(file, p + "attn_q_norm.weight", D),
               c.rms_eps);
      rms_norm(k.data(), std::int64_t{T} * Hkv, D, load_vector(file, p + "attn_k_norm.weight", D),
               c.rms_eps);
    } else {
      adjacent_to_half_split(q, D);
      adjacent_to_half_split(k, D);
    }
    const RopeTable& rope = local ? rope_local : rope_global;
    apply_rope(q, T, Hq, D, rope);
    apply_rope(k, T, Hkv, D, rope);
    if (std::find(opt.capture_layers.begin(), opt.capture_layers.end(), l) !=
        opt.capture_layers.end()) {
      result.captures.push_back(LayerCapture{l, q, k, v});
    }
    AttentionShape shape;
    shape.tokens = T;
    shape.heads_q = Hq;
    shape.heads_kv = Hkv;
    shape.d = D;
    shape.scale = c.attention_scale;
    shape.window = local ? c.sliding_window : 0;
    shape.softcap = attn_softcap;
    const std::vector<float> o = attention(q, k, v, shape, threads);
    h = linear(load_matrix(file, p + "attn_output.weight", H, Hq * D), o, T, threads);
    if (gemma) {
      rms_norm(h.data(), T, H, load_vector(file, p + "post_attention_norm.weight", H), c.rms_eps);
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += h[i];

    // MLP block: down(act(gate(x)) * up(x)).
    h = x;
    rms_norm(h.data(), T, H, load_vector(file, p + "ffn_norm.weight", H), c.rms_eps);
    std::vector<float> gate =
        linear(load_matrix(file, p + "ffn_gate.weight", c.ffn, H), h, T, threads);
    const std::vector<float> up =
        linear(load_matrix(file, p + "ffn_up.weight", c.ffn, H), h, T, threads);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      gate[i] = (gemma ? gelu_tanh(gate[i]) : silu(gate[i])) * up[i];
    }
    h = linear(load_matrix(file, p + "ffn_down.weight", H, c.ffn), gate, T, threads);
    if (gemma) {
      rms_norm(h.data(), T, H, load_vector(file, p + "post_ffw_norm.weight", H), c.rms_eps);
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += h[i];
  }

  // Final norm and LM head (tied to the embedding when the file has no output.weight).
  const int rows = opt.all_logits ? T : 1;
  std::vector<float> last(x.end() - std::int64_t{rows} * H, x.end());
  rms_norm(last.data(), rows, H, load_vector(file, "output_norm.weight", H), c.rms_eps);
  const bool tied = !has_tensor(file, "output.weight");
  result.logits = tied
                      ? linear(embd, last, rows, threads)
                      : linear(load_matrix(file, "output.weight", c.vocab, H), last, rows, threads);
  if (final_softcap > 0.0) {
    for (float& z : result.logits) {
      z = static_cast<float>(final_softcap * std::tanh(z / final_softcap));
    }
  }
  return result;
}

}  // namespace skipsoftmax
