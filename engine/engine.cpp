#include "engine.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "bits16.h"
#include "device.h"
#include "ops.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/paged_kv.h"
#include "skipsoftmax/prefill.h"
#include "weights.h"

namespace skipsoftmax {

using engine::bits16;
using engine::check_cuda;
using engine::DeviceBuffer;
using engine::ensure_bytes;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("engine: ") + what + ": cuBLAS status " +
                             std::to_string(static_cast<int>(status)));
  }
}

// Logit rows computed at once: bounds the logits buffer (128 x 262144 fp32 = 128 MiB on Gemma 3).
constexpr int kLogitRowsPerChunk = 128;

// One sequence's share of a step: `len` new tokens at positions [start, start + len).
struct Part {
  int seq;
  int start;
  int len;
};

enum class StepKind { kPrefill, kDecode };
// kNone still picks the next tokens; kTargets scores the next prompt tokens (Impl::targets_of).
enum class Logits { kNone, kLast, kAll, kTargets };

struct StepOut {
  std::vector<std::int32_t> next;           // [parts]: greedy token after each part (not kAll)
  std::vector<float> logits;                // kLast: [parts, vocab]; kAll: [tokens, vocab]
  std::vector<std::vector<float>> q, k, v;  // per capture layer, in the order asked:
                                            // [tokens, heads, head_dim]
  std::vector<unsigned long long> stats;    // [parts][2]: tiles visited, skipped (global layers)
  std::vector<float> logprobs;              // kTargets: [tokens], 0 at a prompt's last token
};

// The integer inputs of one step, packed into one upload. Offsets index `host`.
struct StepMeta {
  std::vector<std::int32_t> host;
  std::size_t tokens = 0, positions = 0, seq_row = 0, cu_q = 0, cu_k = 0, seq_lens = 0,
              page_table = 0, last_rows = 0;
  int num_tokens = 0, batch = 0, max_q = 0, max_k = 0, max_pages = 0;
  std::int64_t total_k = 0;
  bool history = false;  // some part starts after cached tokens
};

std::vector<float> widen(const std::vector<std::uint16_t>& bits, DType dtype) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i], dtype);
  return out;
}

}  // namespace

struct Engine::Impl {
  ModelConfig config;
  EngineOptions options;
  engine::MemoryCounter memory;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  engine::ModelWeights weights;
  bool gemma = false;
  float embed_scale = 1.f;
  float logit_cap = 0.f;  // 0: none

  // The KV cache of the current batch: [layers][pages, page_size, heads_kv, head_dim] 16-bit.
  DeviceBuffer k_cache, v_cache;
  std::int64_t num_pages = 0;
  std::vector<std::vector<std::int32_t>> seq_pages;  // the pages of each sequence, in order

  // Step buffers, grown to the largest step (sizes in the comments, T tokens, B parts).
  DeviceBuffer meta;      // StepMeta::host
  DeviceBuffer x;         // [T, hidden] fp32, the residual stream
  DeviceBuffer xn;        // [T, hidden] 16-bit, normalized
  DeviceBuffer qkv;       // [T, (heads_q + 2 heads_kv) head_dim] fp32
  DeviceBuffer q, k, v;   // [T, heads, head_dim] 16-bit
  DeviceBuffer attn;      // [T, heads_q head_dim] 16-bit
  DeviceBuffer proj;      // [T, hidden] fp32 (Gemma's post-norms)
  DeviceBuffer gate_up;   // [T, 2 ffn] fp32
  DeviceBuffer act;       // [T, ffn] 16-bit
  DeviceBuffer logits;    // [rows, vocab] fp32
  DeviceBuffer next;      // [B] int32
  DeviceBuffer stats;     // [B][2] u64
  DeviceBuffer targets;   // [T] int32, Logits::kTargets
  DeviceBuffer logprobs;  // [T] fp32, Logits::kTargets
  DeviceBuffer decode_workspace;

  std::vector<cudaEvent_t> events;  // pairs around attention launches, reused
  std::size_t events_used = 0;
  PerPhase<double> attention_ms;
  std::uint64_t peak_used = 0;
  // With Logits::kTargets, the prompts of the parts (indexed by Part::seq): the target of a
  // prompt token is the token after it.
  const std::vector<std::vector<std::int32_t>>* targets_of = nullptr;

  Impl(const gguf::File& file, const ModelConfig& c, const EngineOptions& o);
  ~Impl();

  std::int64_t layer_cache_elems() const {
    return num_pages * options.page_size * config.heads_kv * config.head_dim;
  }
  bits16* k_layer(int l) const { return k_cache.as<bits16>() + l * layer_cache_elems(); }
  bits16* v_layer(int l) const { return v_cache.as<bits16>() + l * layer_cache_elems(); }
  const std::int32_t* meta_at(std::size_t offset) const { return meta.as<std::int32_t>() + offset; }

  void allocate_cache(const std::vector<std::int64_t>& capacity);
  StepMeta build_meta(const std::vector<Part>& parts,
                      const std::vector<std::int32_t>& tokens) const;
  void grow_buffers(const StepMeta& m);
  // y[rows, out] = x[rows, in] W[out, in]^T + beta y.
  void linear(const void* in, int rows, int in_features, const void* w, int out_features, float* y,
              float beta);
  void attention(int layer, const StepMeta& m, StepKind kind);
  void layer(int l, const StepMeta& m, StepKind kind);
  // Final norm and LM head on rows (device indices into x, or null for rows [first, first + n)),
  // in chunks; consume(chunk_first, chunk_rows) runs while the chunk's logits are in `logits`.
  template <typename Consume>
  void logit_chunks(const std::int32_t* rows, int first, int n, Consume consume);
  StepOut run_step(const std::vector<Part>& parts, const std::vector<std::int32_t>& tokens,
                   StepKind kind, Logits want, const std::vector<int>& capture_layers);
  void sample_memory();
  cudaEvent_t next_event();

  // Prefills the prompts (whole or chunked); after each step, on_step(parts, out).
  template <typename OnStep>
  void prefill(const std::vector<std::vector<std::int32_t>>& prompts, Logits want,
               const std::vector<int>& capture_layers, OnStep on_step);
};

Engine::Impl::Impl(const gguf::File& file, const ModelConfig& c, const EngineOptions& o)
    : config(c), options(o) {
  // The options and the model are checked first, so that a bad one is named on any machine.
  const int ps = o.page_size;
  if (ps < kMinPageSize || ps > kMaxPageSize || (ps & (ps - 1)) != 0) {
    throw std::invalid_argument("page size " + std::to_string(ps) + " is not a power of two in [" +
                                std::to_string(kMinPageSize) + ", " + std::to_string(kMaxPageSize) +
                                "]");
  }
  if (o.prefill_chunk < 0) throw std::invalid_argument("the prefill chunk must be >= 0");
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    throw std::runtime_error("head dim " + std::to_string(c.head_dim) +
                             ": the attention kernels take 64, 128 or 256");
  }
  const std::string& a = c.architecture;
  if (const gguf::Value* cap = file.find(a + ".attn_logit_softcapping")) {
    if (const double* value = std::get_if<double>(cap); value && *value > 0.0) {
      throw std::runtime_error(a +
                               ".attn_logit_softcapping: the attention kernels have no score "
                               "soft-capping");
    }
  }
  // Scaled or per-frequency rotary embeddings (Llama 3.1, larger Gemma 3) are not implemented.
  if (file.find(a + ".rope.scaling.factor") && file.number(a + ".rope.scaling.factor") != 1.0) {
    throw std::runtime_error(a +
                             ".rope.scaling.factor: scaled rotary embeddings are not supported");
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == "rope_freqs.weight") {
      throw std::runtime_error("rope_freqs.weight: per-frequency rotary factors are not supported");
    }
  }
  if (!hopper_gpu_available()) {
    throw std::runtime_error(
        "the engine needs a Hopper GPU (compute capability 9.0) and this machine has none");
  }
  if (file.find(a + ".final_logit_softcapping")) {
    logit_cap = static_cast<float>(file.number(a + ".final_logit_softcapping"));
  }
  gemma = a == "gemma3";
  if (gemma) embed_scale = std::sqrt(static_cast<float>(c.hidden));
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cublas(cublasCreate(&cublas), "cublasCreate");
  check_cublas(cublasSetStream(cublas, stream), "cublasSetStream");
  weights = engine::load_weights(file, c, o.dtype, &memory, stream);
}

Engine::Impl::~Impl() {
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  if (cublas) cublasDestroy(cublas);
  if (stream) cudaStreamDestroy(stream);
}

void Engine::Impl::allocate_cache(const std::vector<std::int64_t>& capacity) {
  seq_pages.assign(capacity.size(), {});
  std::int32_t next_page = 0;
  for (std::size_t s = 0; s < capacity.size(); ++s) {
    const std::int64_t pages = (capacity[s] + options.page_size - 1) / options.page_size;
    for (std::int64_t p = 0; p < pages; ++p) seq_pages[s].push_back(next_page++);
  }
  num_pages = next_page;
  const std::size_t bytes = static_cast<std::size_t>(config.layers * layer_cache_elems()) * 2;
  ensure_bytes(k_cache, bytes, &memory);
  ensure_bytes(v_cache, bytes, &memory);
}

StepMeta Engine::Impl::build_meta(const std::vector<Part>& parts,
                                  const std::vector<std::int32_t>& tokens) const {
  StepMeta m;
  m.batch = static_cast<int>(parts.size());
  m.num_tokens = static_cast<int>(tokens.size());
  for (const Part& p : parts) {
    m.max_q = std::max(m.max_q, p.len);
    m.max_k = std::max(m.max_k, p.start + p.len);
    m.max_pages = std::max(m.max_pages, static_cast<int>(seq_pages[p.seq].size()));
    m.total_k += p.start + p.len;
    m.history |= p.start > 0;
  }
  std::vector<std::int32_t>& h = m.host;
  const auto section = [&](std::size_t& offset, std::size_t n) {
    offset = h.size();
    h.resize(h.size() + n, 0);
    return h.begin() + static_cast<std::ptrdiff_t>(offset);
  };
  std::copy(tokens.begin(), tokens.end(), section(m.tokens, tokens.size()));
  section(m.positions, tokens.size());
  section(m.seq_row, tokens.size());
  section(m.cu_q, parts.size() + 1);
  section(m.cu_k, parts.size() + 1);
  section(m.seq_lens, parts.size());
  section(m.page_table, parts.size() * static_cast<std::size_t>(m.max_pages));
  section(m.last_rows, parts.size());
  int row = 0;
  for (std::size_t b = 0; b < parts.size(); ++b) {
    const Part& p = parts[b];
    for (int i = 0; i < p.len; ++i, ++row) {
      h[m.positions + row] = p.start + i;
      h[m.seq_row + row] = static_cast<std::int32_t>(b);
    }
    h[m.cu_q + b + 1] = row;
    h[m.cu_k + b + 1] = h[m.cu_k + b] + p.start + p.len;
    h[m.seq_lens + b] = p.start + p.len;
    h[m.last_rows + b] = row - 1;
    const std::vector<std::int32_t>& pages = seq_pages[p.seq];
    std::copy(pages.begin(), pages.end(),
              h.begin() + static_cast<std::ptrdiff_t>(m.page_table + b * m.max_pages));
  }
  return m;
}

void Engine::Impl::grow_buffers(const StepMeta& m) {
  const std::size_t t = static_cast<std::size_t>(m.num_tokens);
  const std::size_t hidden = config.hidden, d = config.head_dim;
  const std::size_t hq = config.heads_q, hkv = config.heads_kv, ffn = config.ffn;
  ensure_bytes(meta, m.host.size() * 4, &memory);
  ensure_bytes(x, t * hidden * 4, &memory);
  ensure_bytes(xn, t * hidden * 2, &memory);
  ensure_bytes(qkv, t * (hq + 2 * hkv) * d * 4, &memory);
  ensure_bytes(q, t * hq * d * 2, &memory);
  ensure_bytes(k, t * hkv * d * 2, &memory);
  ensure_bytes(v, t * hkv * d * 2, &memory);
  ensure_bytes(attn, t * hq * d * 2, &memory);
  if (gemma) ensure_bytes(proj, t * hidden * 4, &memory);
  ensure_bytes(gate_up, t * 2 * ffn * 4, &memory);
  ensure_bytes(act, t * ffn * 2, &memory);
  const std::size_t logit_rows = std::min<std::size_t>(t, kLogitRowsPerChunk);
  ensure_bytes(logits, logit_rows * static_cast<std::size_t>(config.vocab) * 4, &memory);
  ensure_bytes(next, static_cast<std::size_t>(m.batch) * 4, &memory);
  ensure_bytes(stats, static_cast<std::size_t>(m.batch) * 2 * 8, &memory);
}

void Engine::Impl::linear(const void* in, int rows, int in_features, const void* w,
                          int out_features, float* y, float beta) {
  // Column-major view: Y^T [out, rows] = W [out, in] . X^T [in, rows]; W row-major [out, in] is
  // column-major [in, out], hence the transpose.
  const float alpha = 1.f;
  const cudaDataType_t type = options.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, out_features, rows, in_features,
                            &alpha, w, type, in_features, in, type, in_features, &beta, y,
                            CUDA_R_32F, out_features, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

cudaEvent_t Engine::Impl::next_event() {
  if (events_used == events.size()) {
    cudaEvent_t e;
    check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    events.push_back(e);
  }
  return events[events_used++];
}

void Engine::Impl::attention(int l, const StepMeta& m, StepKind kind) {
  const bool local = config.is_local(l);
  const Phase phase = kind == StepKind::kDecode ? Phase::kDecode : Phase::kPrefill;
  // Local layers never skip: their window already drops the far keys a skip would.
  const Threshold threshold = local ? Threshold::dense() : options.thresholds[phase];
  auto* tile_stats = local ? nullptr : stats.as<unsigned long long>();
  PagedKv paged;
  paged.k_pages = k_layer(l);
  paged.v_pages = v_layer(l);
  paged.num_pages = num_pages;
  paged.page_size = options.page_size;
  paged.page_table = meta_at(m.page_table);
  paged.max_pages_per_seq = m.max_pages;
  if (options.time_attention) check_cuda(cudaEventRecord(next_event(), stream), "event");
  // Decode steps go to the decode kernel (a local layer's with its window); prefill steps to the
  // prefill kernels.
  if (kind == StepKind::kDecode) {
    DecodeArguments a;
    a.dtype = options.dtype;
    a.head_dim = config.head_dim;
    a.q = q.as();
    a.out = attn.as();
    a.kv = paged;
    a.seq_lens = meta_at(m.seq_lens);
    a.batch = m.batch;
    a.max_seq_len = m.max_k;
    a.num_heads_q = config.heads_q;
    a.num_heads_kv = config.heads_kv;
    a.softmax_scale = config.attention_scale;
    a.window = local ? config.sliding_window : 0;
    a.threshold = threshold;
    a.stats = tile_stats;
    ensure_bytes(decode_workspace, decode_workspace_size(a), &memory);
    run_decode(a, decode_workspace.as(), decode_workspace.bytes(), stream);
  } else {
    PrefillArguments a;
    a.dtype = options.dtype;
    a.head_dim = config.head_dim;
    a.q = q.as();
    a.out = attn.as();
    a.cu_seqlens_q = meta_at(m.cu_q);
    a.batch = m.batch;
    a.total_q = m.num_tokens;
    a.max_seqlen_q = m.max_q;
    a.max_seqlen_k = m.max_k;
    a.num_heads_q = config.heads_q;
    a.num_heads_kv = config.heads_kv;
    a.causal = true;
    a.window = local ? config.sliding_window : 0;
    a.softmax_scale = config.attention_scale;
    a.threshold = threshold;
    a.stats = tile_stats;
    if (m.history) {
      // K and V come from the pages (this step's tokens already appended); k and v name the
      // pages too (unused when paged).
      a.paged_kv = paged;
      a.k = paged.k_pages;
      a.v = paged.v_pages;
      a.cu_seqlens_k = meta_at(m.cu_k);
      a.total_k = m.total_k;
    } else {
      a.k = k.as();
      a.v = v.as();
      a.cu_seqlens_k = meta_at(m.cu_q);
      a.total_k = m.num_tokens;
    }
    run_prefill(a, nullptr, stream);
  }
  if (options.time_attention) check_cuda(cudaEventRecord(next_event(), stream), "event");
}

void Engine::Impl::layer(int l, const StepMeta& m, StepKind kind) {
  const engine::LayerWeights& w = weights.layers[static_cast<std::size_t>(l)];
  const int t = m.num_tokens, hidden = config.hidden, ffn = config.ffn;
  const int q_width = config.heads_q * config.head_dim;
  const int qkv_width = (config.heads_q + 2 * config.heads_kv) * config.head_dim;
  const auto eps = static_cast<float>(config.rms_eps);
  engine::rms_norm(x.as<float>(), nullptr, t, hidden, w.attn_norm.as<float>(), eps, xn.as<bits16>(),
                   stream, options.dtype);
  linear(xn.as(), t, hidden, w.qkv.as(), qkv_width, qkv.as<float>(), 0.f);

  engine::QkvArgs a;
  a.qkv = qkv.as<float>();
  a.num_tokens = t;
  a.heads_q = config.heads_q;
  a.heads_kv = config.heads_kv;
  a.head_dim = config.head_dim;
  a.positions = meta_at(m.positions);
  a.q_norm = w.q_norm.as<float>();
  a.k_norm = w.k_norm.as<float>();
  a.eps = eps;
  a.pairs = gemma ? engine::RopePairs::kHalves : engine::RopePairs::kAdjacent;
  a.rope_base = static_cast<float>(config.is_local(l) ? config.rope_base_local : config.rope_base);
  a.dtype = options.dtype;
  a.q = q.as<bits16>();
  a.k = k.as<bits16>();
  a.v = v.as<bits16>();
  a.k_pages = k_layer(l);
  a.v_pages = v_layer(l);
  a.page_table = meta_at(m.page_table);
  a.seq_row = meta_at(m.seq_row);
  a.max_pages = m.max_pages;
  a.page_size = options.page_size;
  engine::qkv_rope_append(a, stream);

  attention(l, m, kind);
  float* residual = x.as<float>();
  if (gemma) {
    linear(attn.as(), t, q_width, w.o.as(), hidden, proj.as<float>(), 0.f);
    engine::add_rms_norm(proj.as<float>(), t, hidden, w.post_attn_norm.as<float>(), eps, residual,
                         stream);
  } else {
    linear(attn.as(), t, q_width, w.o.as(), hidden, residual, 1.f);
  }
  engine::rms_norm(residual, nullptr, t, hidden, w.ffn_norm.as<float>(), eps, xn.as<bits16>(),
                   stream, options.dtype);
  linear(xn.as(), t, hidden, w.gate_up.as(), 2 * ffn, gate_up.as<float>(), 0.f);
  engine::gated_activation(gate_up.as<float>(), t, ffn,
                           gemma ? engine::Activation::kGeluTanh : engine::Activation::kSilu,
                           act.as<bits16>(), stream, options.dtype);
  if (gemma) {
    linear(act.as(), t, ffn, w.down.as(), hidden, proj.as<float>(), 0.f);
    engine::add_rms_norm(proj.as<float>(), t, hidden, w.post_ffn_norm.as<float>(), eps, residual,
                         stream);
  } else {
    linear(act.as(), t, ffn, w.down.as(), hidden, residual, 1.f);
  }
}

template <typename Consume>
void Engine::Impl::logit_chunks(const std::int32_t* rows, int first, int n, Consume consume) {
  const int hidden = config.hidden;
  for (int c = 0; c < n; c += kLogitRowsPerChunk) {
    const int count = std::min(kLogitRowsPerChunk, n - c);
    const float* source = rows ? x.as<float>() : x.as<float>() + std::int64_t{first + c} * hidden;
    engine::rms_norm(source, rows ? rows + c : nullptr, count, hidden,
                     weights.output_norm.as<float>(), static_cast<float>(config.rms_eps),
                     xn.as<bits16>(), stream, options.dtype);
    linear(xn.as(), count, hidden, weights.lm_head_or_embed(), config.vocab, logits.as<float>(),
           0.f);
    if (logit_cap > 0.f) {
      engine::soft_cap(logits.as<float>(), std::int64_t{count} * config.vocab, logit_cap, stream);
    }
    consume(c, count);
  }
}

StepOut Engine::Impl::run_step(const std::vector<Part>& parts,
                               const std::vector<std::int32_t>& tokens, StepKind kind, Logits want,
                               const std::vector<int>& capture_layers) {
  const StepMeta m = build_meta(parts, tokens);
  grow_buffers(m);
  engine::upload(m.host, meta.as(), stream);
  check_cuda(cudaMemsetAsync(stats.as(), 0, stats.bytes(), stream), "memset");
  events_used = 0;
  StepOut out;
  out.q.resize(capture_layers.size());
  out.k.resize(capture_layers.size());
  out.v.resize(capture_layers.size());
  const int t = m.num_tokens;
  engine::embed_tokens(meta_at(m.tokens), t, weights.embed.as<bits16>(), config.hidden, embed_scale,
                       x.as<float>(), stream, options.dtype);
  const std::size_t q_elems = std::size_t(t) * config.heads_q * config.head_dim;
  const std::size_t kv_elems = std::size_t(t) * config.heads_kv * config.head_dim;
  for (int l = 0; l < config.layers; ++l) {
    layer(l, m, kind);
    for (std::size_t c = 0; c < capture_layers.size(); ++c) {
      if (capture_layers[c] != l) continue;
      // q, k and v still hold this layer's post-RoPE values: the buffers are reused per layer.
      out.q[c] = widen(engine::download<std::uint16_t>(q.as(), q_elems, stream), options.dtype);
      out.k[c] = widen(engine::download<std::uint16_t>(k.as(), kv_elems, stream), options.dtype);
      out.v[c] = widen(engine::download<std::uint16_t>(v.as(), kv_elems, stream), options.dtype);
    }
  }
  const std::size_t vocab = static_cast<std::size_t>(config.vocab);
  if (want == Logits::kTargets) {
    std::vector<std::int32_t> host;
    for (const Part& p : parts) {
      const std::vector<std::int32_t>& prompt = (*targets_of)[static_cast<std::size_t>(p.seq)];
      for (int j = p.start; j < p.start + p.len; ++j) {
        host.push_back(j + 1 < static_cast<int>(prompt.size()) ? prompt[j + 1] : -1);
      }
    }
    ensure_bytes(targets, host.size() * 4, &memory);
    ensure_bytes(logprobs, host.size() * 4, &memory);
    engine::upload(host, targets.as(), stream);
    logit_chunks(nullptr, 0, t, [&](int first, int count) {
      engine::target_logprobs(logits.as<float>(), count, config.vocab,
                              targets.as<std::int32_t>() + first, logprobs.as<float>() + first,
                              stream);
    });
    out.logprobs = engine::download<float>(logprobs.as(), host.size(), stream);
  } else if (want == Logits::kAll) {
    out.logits.resize(std::size_t(t) * vocab);
    logit_chunks(nullptr, 0, t, [&](int first, int count) {
      check_cuda(cudaMemcpyAsync(out.logits.data() + std::size_t(first) * vocab, logits.as(),
                                 std::size_t(count) * vocab * 4, cudaMemcpyDeviceToHost, stream),
                 "copy logits");
    });
  } else {
    if (want == Logits::kLast) out.logits.resize(parts.size() * vocab);
    logit_chunks(meta_at(m.last_rows), 0, m.batch, [&](int first, int count) {
      engine::argmax_rows(logits.as<float>(), count, config.vocab, next.as<std::int32_t>() + first,
                          stream);
      if (want == Logits::kLast) {
        check_cuda(cudaMemcpyAsync(out.logits.data() + std::size_t(first) * vocab, logits.as(),
                                   std::size_t(count) * vocab * 4, cudaMemcpyDeviceToHost, stream),
                   "copy logits");
      }
    });
    out.next = engine::download<std::int32_t>(next.as(), parts.size(), stream);
  }
  out.stats = engine::download<unsigned long long>(stats.as(), parts.size() * 2, stream);
  for (std::size_t e = 0; e + 1 < events_used; e += 2) {
    float ms = 0.f;
    check_cuda(cudaEventElapsedTime(&ms, events[e], events[e + 1]), "cudaEventElapsedTime");
    attention_ms[kind == StepKind::kDecode ? Phase::kDecode : Phase::kPrefill] += ms;
  }
  sample_memory();
  return out;
}

void Engine::Impl::sample_memory() {
  std::size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  peak_used = std::max<std::uint64_t>(peak_used, total_bytes - free_bytes);
}

template <typename OnStep>
void Engine::Impl::prefill(const std::vector<std::vector<std::int32_t>>& prompts, Logits want,
                           const std::vector<int>& capture_layers, OnStep on_step) {
  std::vector<int> done(prompts.size(), 0);
  for (;;) {
    std::vector<Part> parts;
    std::vector<std::int32_t> tokens;
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      const int left = static_cast<int>(prompts[s].size()) - done[s];
      if (left == 0) continue;
      const int len = options.prefill_chunk > 0 ? std::min(options.prefill_chunk, left) : left;
      parts.push_back({static_cast<int>(s), done[s], len});
      tokens.insert(tokens.end(), prompts[s].begin() + done[s], prompts[s].begin() + done[s] + len);
      done[s] += len;
    }
    if (parts.empty()) return;
    on_step(parts, run_step(parts, tokens, StepKind::kPrefill, want, capture_layers));
  }
}

Engine::Engine(const gguf::File& file, const ModelConfig& config, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(file, config, options)) {}

Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return impl_->config; }

std::uint64_t Engine::device_bytes_peak() const { return impl_->memory.peak; }

void Engine::set_time_attention(bool on) { impl_->options.time_attention = on; }

namespace {

void check_prompt(const std::vector<std::int32_t>& prompt, std::int64_t extra, const ModelConfig& c,
                  std::size_t index) {
  const std::string where = "prompt " + std::to_string(index) + ": ";
  if (prompt.empty()) throw std::invalid_argument(where + "no tokens");
  for (std::int32_t t : prompt) {
    if (t < 0 || t >= c.vocab) {
      throw std::invalid_argument(where + "token id " + std::to_string(t) +
                                  " is outside the vocabulary");
    }
  }
  if (static_cast<std::int64_t>(prompt.size()) + extra > c.context_length) {
    throw std::invalid_argument(where + "longer than the context of " +
                                std::to_string(c.context_length) + " tokens");
  }
}

}  // namespace

GenerationReport Engine::generate(const std::vector<GenerationRequest>& requests,
                                  std::int32_t eos) {
  Impl& im = *impl_;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::int64_t> capacity;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    if (r.max_new_tokens < 1) {
      throw std::invalid_argument("request " + std::to_string(i) + ": max_new_tokens must be >= 1");
    }
    check_prompt(r.prompt, r.max_new_tokens, im.config, i);
    prompts.push_back(r.prompt);
    capacity.push_back(static_cast<std::int64_t>(r.prompt.size()) + r.max_new_tokens);
  }
  im.allocate_cache(capacity);
  im.attention_ms = {};
  GenerationReport report;
  report.results.resize(requests.size());
  const auto finished = [&](std::size_t s) {
    const GenerationResult& r = report.results[s];
    return r.reached_eos || static_cast<int>(r.tokens.size()) >= requests[s].max_new_tokens;
  };
  const auto add_tiles = [](TileStats& t, const StepOut& out, std::size_t part) {
    t.visited += out.stats[2 * part];
    t.skipped += out.stats[2 * part + 1];
  };
  const auto accept = [&](std::size_t s, std::int32_t token, double at_ms) {
    GenerationResult& r = report.results[s];
    if (r.tokens.empty()) r.ttft_ms = at_ms;
    r.tokens.push_back(token);
    r.last_token_ms = at_ms;
    r.reached_eos = token == eos;
  };

  const Clock::time_point t0 = Clock::now();
  im.prefill(prompts, Logits::kNone, {}, [&](const std::vector<Part>& parts, const StepOut& out) {
    const double now = ms_since(t0);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto s = static_cast<std::size_t>(parts[i].seq);
      add_tiles(report.results[s].tiles.prefill, out, i);
      if (parts[i].start + parts[i].len == static_cast<int>(prompts[s].size())) {
        accept(s, out.next[i], now);
      }
    }
  });
  report.prefill_ms = ms_since(t0);

  for (;;) {
    std::vector<Part> parts;
    std::vector<std::int32_t> tokens;
    for (std::size_t s = 0; s < requests.size(); ++s) {
      if (finished(s)) continue;
      const std::vector<std::int32_t>& gen = report.results[s].tokens;
      // The last generated token enters the cache at the position after everything before it.
      const int start = static_cast<int>(prompts[s].size() + gen.size()) - 1;
      parts.push_back({static_cast<int>(s), start, 1});
      tokens.push_back(gen.back());
    }
    if (parts.empty()) break;
    const StepOut out = im.run_step(parts, tokens, StepKind::kDecode, Logits::kNone, {});
    const double now = ms_since(t0);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto s = static_cast<std::size_t>(parts[i].seq);
      add_tiles(report.results[s].tiles.decode, out, i);
      accept(s, out.next[i], now);
    }
  }
  report.decode_ms = ms_since(t0) - report.prefill_ms;
  report.attention_ms = im.attention_ms;
  report.peak_device_used_bytes = im.peak_used;
  return report;
}

ForwardResult Engine::forward(const std::vector<std::vector<std::int32_t>>& prompts,
                              const ForwardOptions& options) {
  Impl& im = *impl_;
  std::vector<std::int64_t> capacity;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check_prompt(prompts[i], 0, im.config, i);
    capacity.push_back(static_cast<std::int64_t>(prompts[i].size()));
  }
  for (int l : options.capture_layers) {
    if (l < 0 || l >= im.config.layers) {
      throw std::invalid_argument("capture layer " + std::to_string(l) + " is out of range");
    }
  }
  im.allocate_cache(capacity);
  ForwardResult result;
  result.logits.resize(prompts.size());
  result.captures.resize(prompts.size());
  for (auto& per_prompt : result.captures) {
    for (int l : options.capture_layers) per_prompt.push_back(LayerCapture{l, {}, {}, {}});
  }
  const std::size_t vocab = static_cast<std::size_t>(im.config.vocab);
  const std::size_t q_row = std::size_t(im.config.heads_q) * im.config.head_dim;
  const std::size_t kv_row = std::size_t(im.config.heads_kv) * im.config.head_dim;
  if (options.all_logits && options.target_logprobs) {
    throw std::invalid_argument("forward: all_logits and target_logprobs exclude each other");
  }
  const Logits want = options.target_logprobs ? Logits::kTargets
                      : options.all_logits    ? Logits::kAll
                                              : Logits::kLast;
  result.logprobs.resize(prompts.size());
  im.targets_of = &prompts;
  struct ClearTargets {  // targets_of must not outlive this call, also when a step throws
    const std::vector<std::vector<std::int32_t>>*& p;
    ~ClearTargets() { p = nullptr; }
  } clear_targets{im.targets_of};
  const auto append_rows = [](std::vector<float>& to, const std::vector<float>& from,
                              std::size_t row, std::size_t first, std::size_t count) {
    to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(first * row),
              from.begin() + static_cast<std::ptrdiff_t>((first + count) * row));
  };
  im.prefill(prompts, want, options.capture_layers,
             [&](const std::vector<Part>& parts, const StepOut& out) {
               std::size_t first = 0;  // the part's first row in the step
               for (std::size_t i = 0; i < parts.size(); ++i) {
                 const auto s = static_cast<std::size_t>(parts[i].seq);
                 const auto len = static_cast<std::size_t>(parts[i].len);
                 if (options.target_logprobs) {
                   // The prompt's last token has no target.
                   const std::size_t scored =
                       parts[i].start + parts[i].len == static_cast<int>(prompts[s].size())
                           ? len - 1
                           : len;
                   append_rows(result.logprobs[s], out.logprobs, 1, first, scored);
                 } else if (options.all_logits) {
                   append_rows(result.logits[s], out.logits, vocab, first, len);
                 } else if (parts[i].start + parts[i].len == static_cast<int>(prompts[s].size())) {
                   append_rows(result.logits[s], out.logits, vocab, i, 1);
                 }
                 for (std::size_t c = 0; c < options.capture_layers.size(); ++c) {
                   LayerCapture& cap = result.captures[s][c];
                   append_rows(cap.q, out.q[c], q_row, first, len);
                   append_rows(cap.k, out.k[c], kv_row, first, len);
                   append_rows(cap.v, out.v[c], kv_row, first, len);
                 }
                 first += len;
               }
             });
  return result;
}

}  // namespace skipsoftmax
