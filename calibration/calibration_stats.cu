// The calibration statistics pass on the GPU (calibration_cuda.h): per voting tile, the
// critical log-lambda c_t = max over rows of (rowmax_t - max(m_run, rowmax_t)) and the tile's share
// of its rows' softmax mass, in fp32 on CUDA cores.
//
// One CTA of 256 threads per unit: a prefill query tile (up to 64 rows of one query head), or a
// decode GQA group of one sequence with all its splits (up to 64 query heads). Pass 1 walks the
// unit's tiles for each row's maximum and exponential sum; pass 2 walks them again in the vote's
// visit order, resetting the running maximum at each split, and records (c_t, mass_t).
// Shared memory: Q [64][d + 1], one K tile [TK][d + 1] (the +1 keeps the per-column reads of K
// free of bank conflicts) and the score tile [64][TK].
//
// This file is compiled with --expt-relaxed-constexpr so that the device calls tiling.h's
// constexpr kv_tile_at, the one the CPU pass and the reference use.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibration_cuda.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/tiling.h"
#include "tile_scores.h"

namespace skipsoftmax {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 64;
constexpr int kMaxHeadDim = 256;

// A CTA's work: rows of one query tile or GQA group, and its segments (items) of KV tiles.
struct Unit {
  long long seq;
  long long q_begin;  // prefill: first query row of the sequence's chunk
  int head;           // prefill: query head; decode: KV head
  int rows;
  int first_item;
  int num_items;
};

struct Segment {
  long long tile_begin;
  long long tile_count;
  long long offset;
};

struct Params {
  const void* q;
  const void* k;
  bool decode;
  const long long* cu_q;  // prefill [batch + 1]
  const long long* cu_k;
  bool causal;
  long long window;
  const int* page_table;  // decode [batch, max_pages]
  int page_size;
  int max_pages;
  const long long* seq_lens;  // decode [batch]
  int hq, hkv, d, group;
  float scale;
  int order;
  const Unit* units;
  const Segment* segments;
  float* log_crit;   // [tiles]
  float* mass;       // [tiles]
  int* finite_rows;  // [units]
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T, int TK>
__global__ void __launch_bounds__(kThreads) calibration_stats_kernel(Params p) {
  constexpr int kRowGroups = kThreads / TK;  // threads sharing one key column
  constexpr int kRowsPerThread = kMaxRows / kRowGroups;
  static_assert(TK % 32 == 0 && kThreads % TK == 0, "a warp must share its row group");

  extern __shared__ float smem[];
  const int d = p.d, ld = d + 1;
  float* qs = smem;                                  // [kMaxRows][ld]
  float* ks = qs + kMaxRows * ld;                    // [TK][ld]
  float* ss = ks + static_cast<long long>(TK) * ld;  // [kMaxRows][TK]
  __shared__ float row_max[kMaxRows], row_total[kMaxRows], m_run[kMaxRows];
  __shared__ float warp_crit[kWarps], warp_mass[kWarps];

  const Unit u = p.units[blockIdx.x];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);

  long long kv_len, q_off = 0, k_off = 0, causal_shift = 0;
  if (p.decode) {
    kv_len = p.seq_lens[u.seq];
  } else {
    q_off = p.cu_q[u.seq];
    k_off = p.cu_k[u.seq];
    kv_len = p.cu_k[u.seq + 1] - k_off;
    causal_shift = kv_len - (p.cu_q[u.seq + 1] - q_off);  // bottom-right alignment
  }
  const int kvh = p.decode ? u.head : u.head / p.group;

  for (int i = tid; i < kMaxRows * d; i += kThreads) {
    const int r = i / d, c = i % d;
    float x = 0.0f;
    if (r < u.rows) {
      const long long row = p.decode ? (u.seq * p.hq + static_cast<long long>(u.head) * p.group + r)
                                     : ((q_off + u.q_begin + r) * p.hq + u.head);
      x = to_float(q[row * d + c]);
    }
    qs[r * ld + c] = x;
  }
  for (int r = tid; r < kMaxRows; r += kThreads) {
    row_max[r] = -INFINITY;
    row_total[r] = 0.0f;
  }

  const auto visible = [&](int r, long long key) {
    if (r >= u.rows || key >= kv_len) return false;
    if (p.decode) return true;
    const long long pos = causal_shift + u.q_begin + r;
    return (!p.causal || key <= pos) && (p.window == 0 || key > pos - p.window);
  };

  // Scores of KV tile t into ss: scaled dot products, -inf where a row does not see the key.
  const auto score_tile = [&](long long t) {
    __syncthreads();  // the previous tile's readers are done with ks and ss
    const long long k0 = t * TK;
    for (int i = tid; i < TK * d; i += kThreads) {
      const int j = i / d, c = i % d;
      const long long key = k0 + j;
      float x = 0.0f;
      if (key < kv_len) {
        long long row;
        if (p.decode) {
          const long long slot =
              static_cast<long long>(p.page_table[u.seq * p.max_pages + key / p.page_size]) *
                  p.page_size +
              key % p.page_size;
          row = slot * p.hkv + kvh;
        } else {
          row = (k_off + key) * p.hkv + kvh;
        }
        x = to_float(k[row * d + c]);
      }
      ks[j * ld + c] = x;
    }
    __syncthreads();
    const int j = tid % TK, g = tid / TK;
    float acc[kRowsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) acc[i] = 0.0f;
    for (int c = 0; c < d; ++c) {
      const float kx = ks[j * ld + c];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        acc[i] = fmaf(qs[(g + i * kRowGroups) * ld + c], kx, acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = g + i * kRowGroups;
      ss[r * TK + j] = visible(r, k0 + j) ? acc[i] * p.scale : -INFINITY;
    }
    __syncthreads();
  };

  // Pass 1: each row's maximum and exponential sum over all the unit's tiles. A row belongs to
  // one warp throughout, so its entries need no barrier between tiles.
  for (int s = 0; s < u.num_items; ++s) {
    const Segment seg = p.segments[u.first_item + s];
    for (long long pos = 0; pos < seg.tile_count; ++pos) {
      score_tile(seg.tile_begin + pos);
      for (int r = warp; r < kMaxRows; r += kWarps) {
        const float* sr = ss + r * TK;
        float mx = -INFINITY;
        for (int j = lane; j < TK; j += 32) mx = fmaxf(mx, sr[j]);
        mx = warp_max(mx);
        if (mx == -INFINITY) continue;
        float sum = 0.0f;
        for (int j = lane; j < TK; j += 32) sum += expf(sr[j] - mx);
        sum = warp_sum(sum);
        const float m_old = row_max[r];
        const float m_new = fmaxf(m_old, mx);
        const float total = row_total[r] * expf(m_old - m_new) + sum * expf(mx - m_new);
        __syncwarp();
        if (lane == 0) {
          row_max[r] = m_new;
          row_total[r] = total;
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    int finite = 0;
    for (int r = 0; r < u.rows; ++r) finite += isfinite(row_max[r]) && row_total[r] > 0.0f;
    p.finite_rows[blockIdx.x] = finite;
  }

  // Pass 2: the vote's order, a fresh running maximum per split. Decode splits after the first
  // start from tile 0's row maxima (the sink), as the decode kernel does.
  for (int s = 0; s < u.num_items; ++s) {
    const Segment seg = p.segments[u.first_item + s];
    __syncthreads();
    for (int r = tid; r < kMaxRows; r += kThreads) m_run[r] = -INFINITY;
    if (p.decode && seg.tile_begin > 0 && seg.tile_count > 0) {
      score_tile(0);
      for (int r = warp; r < kMaxRows; r += kWarps) {
        const float* sr = ss + r * TK;
        float mx = -INFINITY;
        for (int j = lane; j < TK; j += 32) mx = fmaxf(mx, sr[j]);
        mx = warp_max(mx);
        __syncwarp();
        if (lane == 0) m_run[r] = mx;
        __syncwarp();
      }
    }
    for (long long pos = 0; pos < seg.tile_count; ++pos) {
      score_tile(seg.tile_begin + kv_tile_at(static_cast<KvOrder>(p.order), pos, seg.tile_count));
      float crit = -INFINITY, mass = 0.0f;
      for (int r = warp; r < kMaxRows; r += kWarps) {
        const float* sr = ss + r * TK;
        float mx = -INFINITY;
        for (int j = lane; j < TK; j += 32) mx = fmaxf(mx, sr[j]);
        mx = warp_max(mx);
        if (mx == -INFINITY) continue;  // a row that sees nothing here votes skip
        crit = fmaxf(crit, mx - fmaxf(m_run[r], mx));
        float share = 0.0f;
        for (int j = lane; j < TK; j += 32) share += expf(sr[j] - row_max[r]);
        mass += warp_sum(share) / row_total[r];
        __syncwarp();
        if (lane == 0) m_run[r] = fmaxf(m_run[r], mx);
        __syncwarp();
      }
      if (lane == 0) {
        warp_crit[warp] = crit;
        warp_mass[warp] = mass;
      }
      __syncthreads();
      if (tid == 0) {
        float c = -INFINITY, m = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          c = fmaxf(c, warp_crit[w]);
          m += warp_mass[w];
        }
        p.log_crit[seg.offset + pos] = c;
        p.mass[seg.offset + pos] = m;
      }
    }
  }
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("calibration statistics: ") + what + ": " +
                             cudaGetErrorString(err));
  }
}

// A device allocation freed on scope exit.
class Device {
 public:
  explicit Device(std::size_t bytes) { check(cudaMalloc(&ptr_, bytes ? bytes : 1), "cudaMalloc"); }
  ~Device() { cudaFree(ptr_); }
  Device(Device&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  Device& operator=(Device&&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

template <typename T>
Device upload(const std::vector<T>& host, cudaStream_t stream) {
  Device d(host.size() * sizeof(T));
  check(cudaMemcpyAsync(d.as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                        stream),
        "copy to device");
  return d;
}

template <typename T, int TK>
void launch_typed(const Params& p, int units, int head_dim, cudaStream_t stream) {
  const std::size_t bytes =
      sizeof(float) * (static_cast<std::size_t>(kMaxRows + TK) * (head_dim + 1) + kMaxRows * TK);
  int device = 0, limit = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "shared memory limit");
  if (bytes > static_cast<std::size_t>(limit)) {
    throw std::invalid_argument("calibration statistics: head dim " + std::to_string(head_dim) +
                                " with tiles of " + std::to_string(TK) + " keys needs " +
                                std::to_string(bytes) + " bytes of shared memory, over " +
                                std::to_string(limit));
  }
  auto* kernel = calibration_stats_kernel<T, TK>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        "shared memory attribute");
  kernel<<<units, kThreads, bytes, stream>>>(p);
  check(cudaGetLastError(), "launch");
}

template <typename T>
void launch_tk(const Params& p, int units, int head_dim, int tile_k, cudaStream_t stream) {
  switch (tile_k) {
    case 32:
      return launch_typed<T, 32>(p, units, head_dim, stream);
    case 64:
      return launch_typed<T, 64>(p, units, head_dim, stream);
    case 128:
      return launch_typed<T, 128>(p, units, head_dim, stream);
    default:
      throw std::invalid_argument("calibration statistics on the GPU: tile_k " +
                                  std::to_string(tile_k) + " (supported: 32, 64, 128)");
  }
}

void launch(StatsDtype dtype, const Params& p, int units, int head_dim, int tile_k,
            cudaStream_t stream) {
  if (units == 0) return;
  switch (dtype) {
    case StatsDtype::kF32:
      return launch_tk<float>(p, units, head_dim, tile_k, stream);
    case StatsDtype::kF16:
      return launch_tk<__half>(p, units, head_dim, tile_k, stream);
    case StatsDtype::kBF16:
      return launch_tk<__nv_bfloat16>(p, units, head_dim, tile_k, stream);
  }
}

void check_shape(int rows, int head_dim) {
  if (rows > kMaxRows) {
    throw std::invalid_argument("calibration statistics on the GPU: " + std::to_string(rows) +
                                " rows per vote, at most " + std::to_string(kMaxRows));
  }
  if (head_dim > kMaxHeadDim) {
    throw std::invalid_argument("calibration statistics on the GPU: head dim " +
                                std::to_string(head_dim) + " over " + std::to_string(kMaxHeadDim));
  }
}

std::vector<Segment> segments_of(const std::vector<StatsItem>& items) {
  std::vector<Segment> segs;
  for (const StatsItem& it : items) segs.push_back({it.tile_begin, it.tile_count, it.offset});
  return segs;
}

// The kernel's per-tile floats and per-unit row counts into a TileStats laid out like the CPU's.
void download(TileStats& st, const Device& crit, const Device& mass, const Device& finite,
              const std::vector<Unit>& units, cudaStream_t stream) {
  const std::size_t n = st.log_crit.size();
  std::vector<float> c(n), m(n);
  std::vector<int> f(units.size());
  check(cudaMemcpyAsync(c.data(), crit.as<void>(), n * 4, cudaMemcpyDeviceToHost, stream), "copy");
  check(cudaMemcpyAsync(m.data(), mass.as<void>(), n * 4, cudaMemcpyDeviceToHost, stream), "copy");
  check(cudaMemcpyAsync(f.data(), finite.as<void>(), f.size() * 4, cudaMemcpyDeviceToHost, stream),
        "copy");
  check(cudaStreamSynchronize(stream), "kernel");
  for (std::size_t i = 0; i < n; ++i) {
    st.log_crit[i] = c[i];
    st.mass[i] = m[i];
  }
  for (std::size_t i = 0; i < units.size(); ++i) st.rows[units[i].seq] += f[i];
}

}  // namespace

TileStats prefill_tile_stats_device(const PrefillProblem& shape, const DeviceQk& qk,
                                    const StatsOptions& opt, void* stream_ptr) {
  PrefillProblem p = shape;
  p.q = static_cast<const float*>(qk.q);  // only checked to be set
  p.k = static_cast<const float*>(qk.k);
  p.v = p.k;
  validate(p);
  check_shape(opt.tiles.tile_q, p.head_dim);
  if (opt.tiles.tile_k <= 0 || opt.tiles.tile_q <= 0) {
    throw std::invalid_argument("tile_q and tile_k must be positive");
  }
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  TileStats st = prefill_stats_layout(p, opt.tiles);
  std::vector<Unit> units;
  for (std::size_t i = 0; i < st.items.size(); ++i) {
    const StatsItem& it = st.items[i];
    units.push_back({it.seq, it.q_begin, it.head, static_cast<int>(it.q_end - it.q_begin),
                     static_cast<int>(i), 1});
  }
  std::vector<long long> cu_q(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end());
  std::vector<long long> cu_k(p.cu_seqlens_k.begin(), p.cu_seqlens_k.end());
  const Device d_units = upload(units, stream), d_segs = upload(segments_of(st.items), stream);
  const Device d_cu_q = upload(cu_q, stream), d_cu_k = upload(cu_k, stream);
  Device crit(st.log_crit.size() * 4), mass(st.mass.size() * 4), finite(units.size() * 4);

  Params prm{};
  prm.q = qk.q;
  prm.k = qk.k;
  prm.decode = false;
  prm.cu_q = d_cu_q.as<long long>();
  prm.cu_k = d_cu_k.as<long long>();
  prm.causal = p.causal;
  prm.window = p.window;
  prm.hq = p.num_heads_q;
  prm.hkv = p.num_heads_kv;
  prm.d = p.head_dim;
  prm.group = p.num_heads_q / p.num_heads_kv;
  prm.scale = static_cast<float>(softmax_scale_or_default(p.softmax_scale, p.head_dim));
  prm.order = static_cast<int>(opt.tiles.order);
  prm.units = d_units.as<Unit>();
  prm.segments = d_segs.as<Segment>();
  prm.log_crit = crit.as<float>();
  prm.mass = mass.as<float>();
  prm.finite_rows = finite.as<int>();
  launch(qk.dtype, prm, static_cast<int>(units.size()), p.head_dim, opt.tiles.tile_k, stream);
  download(st, crit, mass, finite, units, stream);
  return st;
}

TileStats decode_tile_stats_device(const DecodeProblem& shape, const DeviceQk& qk,
                                   const StatsOptions& opt, void* stream_ptr) {
  DecodeProblem p = shape;
  p.q = static_cast<const float*>(qk.q);
  p.kv.k_pages = static_cast<const float*>(qk.k);
  p.kv.v_pages = p.kv.k_pages;
  validate(p);
  const int group = p.num_heads_q / p.num_heads_kv;
  check_shape(group, p.head_dim);
  if (opt.num_splits <= 0) throw std::invalid_argument("num_splits must be positive");
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int tk = opt.tiles.tile_k, splits = opt.num_splits;
  const std::size_t batch = p.kv.seq_lens.size();
  TileStats st = decode_stats_layout(p, tk, splits);
  std::vector<Unit> units;
  for (std::size_t b = 0; b < batch; ++b) {
    for (int h = 0; h < p.num_heads_kv; ++h) {
      const int first = static_cast<int>((b * p.num_heads_kv + h) * splits);
      units.push_back({static_cast<long long>(b), 0, h, group, first, splits});
    }
  }
  std::vector<int> table(p.kv.page_table.begin(), p.kv.page_table.end());
  std::vector<long long> lens(p.kv.seq_lens.begin(), p.kv.seq_lens.end());
  const Device d_units = upload(units, stream), d_segs = upload(segments_of(st.items), stream);
  const Device d_table = upload(table, stream), d_lens = upload(lens, stream);
  Device crit(st.log_crit.size() * 4), mass(st.mass.size() * 4), finite(units.size() * 4);

  Params prm{};
  prm.q = qk.q;
  prm.k = qk.k;
  prm.decode = true;
  prm.page_table = d_table.as<int>();
  prm.page_size = p.kv.page_size;
  prm.max_pages = p.kv.max_pages_per_seq;
  prm.seq_lens = d_lens.as<long long>();
  prm.hq = p.num_heads_q;
  prm.hkv = p.num_heads_kv;
  prm.d = p.head_dim;
  prm.group = group;
  prm.scale = static_cast<float>(softmax_scale_or_default(p.softmax_scale, p.head_dim));
  prm.order = static_cast<int>(KvOrder::kForward);
  prm.units = d_units.as<Unit>();
  prm.segments = d_segs.as<Segment>();
  prm.log_crit = crit.as<float>();
  prm.mass = mass.as<float>();
  prm.finite_rows = finite.as<int>();
  launch(qk.dtype, prm, static_cast<int>(units.size()), p.head_dim, tk, stream);
  download(st, crit, mass, finite, units, stream);
  return st;
}

TileStats prefill_tile_stats_cuda(const PrefillProblem& p, const StatsOptions& opt) {
  PrefillProblem checked = p;
  if (!checked.v) checked.v = checked.k;  // never read
  validate(checked);
  const std::size_t dim = static_cast<std::size_t>(p.head_dim);
  const std::vector<float> q(p.q, p.q + p.cu_seqlens_q.back() * p.num_heads_q * dim);
  const std::vector<float> k(p.k, p.k + p.cu_seqlens_k.back() * p.num_heads_kv * dim);
  const Device dq = upload(q, nullptr), dk = upload(k, nullptr);
  return prefill_tile_stats_device(p, {StatsDtype::kF32, dq.as<void>(), dk.as<void>()}, opt,
                                   nullptr);
}

TileStats decode_tile_stats_cuda(const DecodeProblem& p, const StatsOptions& opt) {
  DecodeProblem checked = p;
  if (!checked.kv.v_pages) checked.kv.v_pages = checked.kv.k_pages;
  validate(checked);
  const std::size_t dim = static_cast<std::size_t>(p.head_dim);
  const std::vector<float> q(p.q, p.q + p.kv.seq_lens.size() * p.num_heads_q * dim);
  const std::vector<float> k(p.kv.k_pages,
                             p.kv.k_pages + p.kv.num_pages * p.kv.page_size * p.num_heads_kv * dim);
  const Device dq = upload(q, nullptr), dk = upload(k, nullptr);
  return decode_tile_stats_device(p, {StatsDtype::kF32, dq.as<void>(), dk.as<void>()}, opt,
                                  nullptr);
}

}  // namespace skipsoftmax
