// The engine's per-layer kernels besides attention and the matrix products (ops.h). Activations
// between the matrix products stay in fp32; what feeds a matrix product or the attention kernels
// is rounded to the engine's 16-bit type (bf16 or fp16) once, here.

#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "bits16.h"
#include "common/launch_check.h"
#include "ops.h"

namespace skipsoftmax::engine {
namespace {

constexpr int kNormThreads = 256;
constexpr int kRowThreads = 1024;  // a block per vocabulary row (argmax, log-softmax)
constexpr int kMaxWarps = 32;
constexpr int kElementwiseThreads = 256;
// Enough blocks to fill the GPU; the grid-stride loops cover the rest.
constexpr std::int64_t kMaxBlocks = 1 << 16;
// sqrt(2 / pi), the constant of GELU's tanh approximation.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// Sum over the block (any multiple of 32 threads up to 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[kMaxWarps];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// Maximum over the block, as block_sum.
__device__ float block_max(float v) {
  __shared__ float partial[kMaxWarps];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float m = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : -FLT_MAX;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) total = m;
  }
  __syncthreads();
  return total;
}

// 1 / sqrt(mean of squares + eps) of one row of n fp32 values.
__device__ float inv_rms(const float* x, int n, float eps) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  return 1.f / sqrtf(block_sum(ss) / static_cast<float>(n) + eps);
}

__global__ void embed_kernel(const std::int32_t* tokens, const bits16* table, int hidden,
                             float scale, float* x, bool fp16) {
  const bits16* row = table + static_cast<std::int64_t>(tokens[blockIdx.x]) * hidden;
  float* out = x + static_cast<std::int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = from_bits16(row[i], fp16) * scale;
}

__global__ void rms_norm_kernel(const float* x, const std::int32_t* rows, int hidden,
                                const float* w, float eps, bits16* y, bool fp16) {
  const int r = rows ? rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const float* in = x + static_cast<std::int64_t>(r) * hidden;
  bits16* out = y + static_cast<std::int64_t>(blockIdx.x) * hidden;
  const float inv = inv_rms(in, hidden, eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    out[i] = to_bits16(in[i] * inv * w[i], fp16);
}

__global__ void add_rms_norm_kernel(const float* y, int hidden, const float* w, float eps,
                                    float* x) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * hidden;
  const float inv = inv_rms(y + row, hidden, eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[row + i] += y[row + i] * inv * w[i];
}

// One block per (token, head), one thread per rotation pair.
__global__ void qkv_rope_kernel(QkvArgs a) {
  const int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x;
  const int d = a.head_dim, heads = a.heads_q + 2 * a.heads_kv;
  const bool is_q = head < a.heads_q, is_k = !is_q && head < a.heads_q + a.heads_kv;
  const int lo = a.pairs == RopePairs::kAdjacent ? 2 * i : i;
  const int hi = a.pairs == RopePairs::kAdjacent ? 2 * i + 1 : i + d / 2;
  const float* in = a.qkv + (static_cast<std::int64_t>(t) * heads + head) * d;
  float x0 = in[lo], x1 = in[hi];
  const int pos = a.positions[t];
  if (is_q || is_k) {
    if (const float* w = is_q ? a.q_norm : a.k_norm) {
      const float inv = 1.f / sqrtf(block_sum(x0 * x0 + x1 * x1) / static_cast<float>(d) + a.eps);
      x0 = x0 * inv * w[lo];
      x1 = x1 * inv * w[hi];
    }
    // theta_i = pos * base^(-2i/d), as Hugging Face's inverse frequencies, in fp32.
    const float inv_freq =
        1.f / powf(a.rope_base, static_cast<float>(2 * i) / static_cast<float>(d));
    float s, c;
    sincosf(static_cast<float>(pos) * inv_freq, &s, &c);
    const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
    x0 = r0;
    x1 = r1;
  }
  const int kv_head = is_q ? 0 : (is_k ? head - a.heads_q : head - a.heads_q - a.heads_kv);
  bits16* out =
      is_q ? a.q + (static_cast<std::int64_t>(t) * a.heads_q + head) * d
           : (is_k ? a.k : a.v) + (static_cast<std::int64_t>(t) * a.heads_kv + kv_head) * d;
  const bool fp16 = a.dtype == DType::kF16;
  const bits16 b0 = to_bits16(x0, fp16), b1 = to_bits16(x1, fp16);
  out[lo] = b0;
  out[hi] = b1;
  if (!is_q && a.k_pages) {
    const std::int64_t page =
        a.page_table[static_cast<std::int64_t>(a.seq_row[t]) * a.max_pages + pos / a.page_size];
    bits16* cache = (is_k ? a.k_pages : a.v_pages) +
                    ((page * a.page_size + pos % a.page_size) * a.heads_kv + kv_head) * d;
    cache[lo] = b0;
    cache[hi] = b1;
  }
}

__global__ void gated_activation_kernel(const float* gate_up, int num_tokens, int ffn,
                                        Activation act, bits16* h, bool fp16) {
  const std::int64_t n = static_cast<std::int64_t>(num_tokens) * ffn;
  for (std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = idx / ffn, i = idx % ffn;
    const float g = gate_up[t * 2 * ffn + i], u = gate_up[t * 2 * ffn + ffn + i];
    const float a = act == Activation::kSilu
                        ? g / (1.f + expf(-g))
                        : 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + kGeluCubic * g * g * g)));
    h[idx] = to_bits16(a * u, fp16);
  }
}

__global__ void soft_cap_kernel(float* x, std::int64_t n, float cap) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

// Larger value wins; on a tie, the smaller index (the first maximum, as torch.argmax).
__device__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void argmax_kernel(const float* logits, int vocab, std::int32_t* out) {
  __shared__ float vals[kMaxWarps];
  __shared__ int idxs[kMaxWarps];
  const float* row = logits + static_cast<std::int64_t>(blockIdx.x) * vocab;
  float v = -FLT_MAX;
  int idx = vocab;  // loses every tie with a real index
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) better(v, idx, row[i], i);
  for (int o = 16; o > 0; o >>= 1) {
    better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    vals[warp] = v;
    idxs[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    const bool live = lane < static_cast<int>(blockDim.x / 32);
    v = live ? vals[lane] : -FLT_MAX;
    idx = live ? idxs[lane] : vocab;
    for (int o = 16; o > 0; o >>= 1) {
      better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
    }
    if (lane == 0) out[blockIdx.x] = idx < vocab ? idx : 0;
  }
}

__global__ void target_logprob_kernel(const float* logits, int vocab, const std::int32_t* targets,
                                      float* out) {
  const int target = targets[blockIdx.x];
  if (target < 0) {
    if (threadIdx.x == 0) out[blockIdx.x] = 0.f;
    return;
  }
  const float* row = logits + static_cast<std::int64_t>(blockIdx.x) * vocab;
  float m = -FLT_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, row[i]);
  m = block_max(m);
  float sum = 0.f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(row[i] - m);
  sum = block_sum(sum);
  if (threadIdx.x == 0) out[blockIdx.x] = row[target] - m - logf(sum);
}

int grid_for(std::int64_t n) {
  return static_cast<int>(
      std::min((n + kElementwiseThreads - 1) / kElementwiseThreads, kMaxBlocks));
}

}  // namespace

void embed_tokens(const std::int32_t* tokens, int num_tokens, const bits16* table, int hidden,
                  float scale, float* x, cudaStream_t stream, DType dtype) {
  if (num_tokens == 0) return;
  embed_kernel<<<num_tokens, kNormThreads, 0, stream>>>(tokens, table, hidden, scale, x,
                                                        dtype == DType::kF16);
  common::check_last_launch("embed_tokens");
}

void rms_norm(const float* x, const std::int32_t* rows, int num_rows, int hidden, const float* w,
              float eps, bits16* y, cudaStream_t stream, DType dtype) {
  if (num_rows == 0) return;
  rms_norm_kernel<<<num_rows, kNormThreads, 0, stream>>>(x, rows, hidden, w, eps, y,
                                                         dtype == DType::kF16);
  common::check_last_launch("rms_norm");
}

void add_rms_norm(const float* y, int num_rows, int hidden, const float* w, float eps, float* x,
                  cudaStream_t stream) {
  if (num_rows == 0) return;
  add_rms_norm_kernel<<<num_rows, kNormThreads, 0, stream>>>(y, hidden, w, eps, x);
  common::check_last_launch("add_rms_norm");
}

void qkv_rope_append(const QkvArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  if (a.head_dim % 64 != 0 || a.head_dim > 256) {
    throw std::invalid_argument("qkv_rope_append: head_dim " + std::to_string(a.head_dim) +
                                " is not 64, 128 or 256");
  }
  const dim3 grid(static_cast<unsigned>(a.num_tokens),
                  static_cast<unsigned>(a.heads_q + 2 * a.heads_kv));
  qkv_rope_kernel<<<grid, a.head_dim / 2, 0, stream>>>(a);
  common::check_last_launch("qkv_rope_append");
}

void gated_activation(const float* gate_up, int num_tokens, int ffn, Activation act, bits16* h,
                      cudaStream_t stream, DType dtype) {
  const std::int64_t n = static_cast<std::int64_t>(num_tokens) * ffn;
  if (n == 0) return;
  gated_activation_kernel<<<grid_for(n), kElementwiseThreads, 0, stream>>>(
      gate_up, num_tokens, ffn, act, h, dtype == DType::kF16);
  common::check_last_launch("gated_activation");
}

void soft_cap(float* x, std::int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  soft_cap_kernel<<<grid_for(n), kElementwiseThreads, 0, stream>>>(x, n, cap);
  common::check_last_launch("soft_cap");
}

void argmax_rows(const float* logits, int rows, int vocab, std::int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  argmax_kernel<<<rows, kRowThreads, 0, stream>>>(logits, vocab, out);
  common::check_last_launch("argmax_rows");
}

void target_logprobs(const float* logits, int rows, int vocab, const std::int32_t* targets,
                     float* out, cudaStream_t stream) {
  if (rows == 0) return;
  target_logprob_kernel<<<rows, kRowThreads, 0, stream>>>(logits, vocab, targets, out);
  common::check_last_launch("target_logprobs");
}

}  // namespace skipsoftmax::engine
