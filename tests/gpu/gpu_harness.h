// Device buffers and packed ragged batches for the GPU tests and benchmarks.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "bits16.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"

namespace skipsoftmax::gpu {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
};

// Relative L2 error of a against the reference.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// Usual bounds of the precision on rel_l2 against float64: P is rounded to the input type
// before P V.
inline double tolerance(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

inline std::uint16_t nan_bits(DType t) { return t == DType::kBF16 ? 0x7fc0 : 0x7e00; }

// A ragged batch: each sequence is a synthetic real-structure sequence of kv_len tokens whose
// last q_len tokens are the queries. Inputs are rounded to the dtype, so that the CPU reference
// sees exactly what the GPU sees.
struct HostBatch {
  DType dtype = DType::kBF16;
  int hq = 0, hkv = 0, dim = 0;
  std::vector<std::int64_t> q_lens, kv_lens;
  std::vector<float> q, k, v;  // widened from the 16-bit values
  std::vector<std::int32_t> cu_q, cu_k;
  int max_q = 0, max_k = 0;
};

inline HostBatch make_host_batch(DType dtype, int hq, int hkv, int dim,
                                 const std::vector<std::int64_t>& q_lens,
                                 const std::vector<std::int64_t>& kv_lens, std::uint64_t seed,
                                 const SyntheticSpec& shape = {}) {
  HostBatch b;
  b.dtype = dtype;
  b.hq = hq;
  b.hkv = hkv;
  b.dim = dim;
  b.q_lens = q_lens;
  b.kv_lens = kv_lens;
  b.cu_q = {0};
  b.cu_k = {0};
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    SyntheticSpec spec = shape;
    spec.tokens = kv_lens[i];
    spec.num_heads_q = hq;
    spec.num_heads_kv = hkv;
    spec.head_dim = dim;
    spec.seed = seed + i;
    const SyntheticQkv s = make_structured_qkv(spec);
    const std::size_t q_row = static_cast<std::size_t>(hq) * dim;
    b.q.insert(b.q.end(), s.q.end() - static_cast<std::ptrdiff_t>(q_lens[i] * q_row), s.q.end());
    b.k.insert(b.k.end(), s.k.begin(), s.k.end());
    b.v.insert(b.v.end(), s.v.begin(), s.v.end());
    b.cu_q.push_back(b.cu_q.back() + static_cast<std::int32_t>(q_lens[i]));
    b.cu_k.push_back(b.cu_k.back() + static_cast<std::int32_t>(kv_lens[i]));
    b.max_q = std::max<int>(b.max_q, static_cast<int>(q_lens[i]));
    b.max_k = std::max<int>(b.max_k, static_cast<int>(kv_lens[i]));
  }
  for (auto* t : {&b.q, &b.k, &b.v}) {
    for (float& x : *t) x = from_bits(to_bits(x, dtype), dtype);
  }
  return b;
}

// 16-bit values of x followed by `pad_rows` rows of NaN.
inline std::vector<std::uint16_t> padded_bits(const std::vector<float>& x, std::size_t row,
                                              std::size_t pad_rows, DType t) {
  std::vector<std::uint16_t> bits(x.size() + pad_rows * row, nan_bits(t));
  for (std::size_t i = 0; i < x.size(); ++i) bits[i] = to_bits(x[i], t);
  return bits;
}

inline DeviceBuffer upload_bits(const std::vector<std::uint16_t>& bits) {
  DeviceBuffer d(bits.size() * 2);
  d.upload(bits);
  return d;
}

// The batch on the device, with kPad NaN rows after every tensor (reads past the end fail
// loudly) and a NaN-poisoned output (unwritten elements fail loudly).
struct DeviceBatch {
  static constexpr std::size_t kPad = 256;
  DeviceBuffer q, k, v, out, cu_q, cu_k;
  std::int64_t total_q, total_k;
  explicit DeviceBatch(const HostBatch& b)
      : q(upload_bits(padded_bits(b.q, std::size_t(b.hq) * b.dim, kPad, b.dtype))),
        k(upload_bits(padded_bits(b.k, std::size_t(b.hkv) * b.dim, kPad, b.dtype))),
        v(upload_bits(padded_bits(b.v, std::size_t(b.hkv) * b.dim, kPad, b.dtype))),
        out(q.bytes()),
        cu_q(b.cu_q.size() * 4),
        cu_k(b.cu_k.size() * 4),
        total_q(b.cu_q.back()),
        total_k(b.cu_k.back()) {
    poison_output(b.dtype);
    cu_q.upload(b.cu_q);
    cu_k.upload(b.cu_k);
  }
  void poison_output(DType t) {
    out.upload(std::vector<std::uint16_t>(out.bytes() / 2, nan_bits(t)));
  }
};

inline PrefillArguments prefill_args(const HostBatch& b, const DeviceBatch& d, bool causal,
                                     Threshold threshold, KvOrder order) {
  PrefillArguments a;
  a.dtype = b.dtype;
  a.head_dim = b.dim;
  a.q = d.q.get();
  a.k = d.k.get();
  a.v = d.v.get();
  a.out = d.out.get();
  a.cu_seqlens_q = static_cast<const std::int32_t*>(d.cu_q.get());
  a.cu_seqlens_k = static_cast<const std::int32_t*>(d.cu_k.get());
  a.batch = static_cast<int>(b.q_lens.size());
  a.total_q = d.total_q;
  a.total_k = d.total_k;
  a.max_seqlen_q = b.max_q;
  a.max_seqlen_k = b.max_k;
  a.num_heads_q = b.hq;
  a.num_heads_kv = b.hkv;
  a.causal = causal;
  a.threshold = std::move(threshold);
  a.kv_order = order;
  return a;
}

inline PrefillProblem reference_problem(const HostBatch& b, bool causal) {
  PrefillProblem p;
  p.q = b.q.data();
  p.k = b.k.data();
  p.v = b.v.data();
  p.num_heads_q = b.hq;
  p.num_heads_kv = b.hkv;
  p.head_dim = b.dim;
  p.cu_seqlens_q.assign(b.cu_q.begin(), b.cu_q.end());
  p.cu_seqlens_k.assign(b.cu_k.begin(), b.cu_k.end());
  p.causal = causal;
  return p;
}

// The GPU's per-sequence [visited, skipped] tile counts against the reference's: visited equal,
// skipped within rounding of the threshold (max(1, 0.5% of the tiles); docs/KERNELS.md). The
// caller's counters accumulate the disagreements and the tiles, for the test log.
inline void expect_stats_agree(const std::vector<unsigned long long>& gpu,
                               const AttentionStats& ref, const std::string& what,
                               std::int64_t& disagreements, std::int64_t& tiles) {
  for (std::size_t i = 0; i < ref.sequences.size(); ++i) {
    const auto& s = ref.sequences[i];
    tiles += s.tiles_total;
    disagreements += std::llabs(static_cast<long long>(gpu[2 * i + 1]) -
                                static_cast<long long>(s.tiles_skipped));
    EXPECT_EQ(gpu[2 * i], static_cast<unsigned long long>(s.tiles_total))
        << what << " sequence " << i << ": visited tiles";
    const double diff =
        std::abs(static_cast<double>(gpu[2 * i + 1]) - static_cast<double>(s.tiles_skipped));
    EXPECT_LE(diff, std::max(1.0, 0.005 * static_cast<double>(s.tiles_total)))
        << what << " sequence " << i << ": skipped " << gpu[2 * i + 1] << " vs reference "
        << s.tiles_skipped;
  }
}

// The GPU's log-sum-exps (float32) against the reference's: -inf where the reference has -inf,
// else within 1e-4 relative (float sums against float64). Rows of `dense_rows` see no skip
// decision and must all hold; elsewhere a decision within rounding of the threshold (see
// expect_stats_agree) moves a row's sum by the tile it skipped or kept, so 1% of the rows may
// differ more.
inline void expect_lse_close(const std::vector<float>& gpu, const std::vector<double>& ref,
                             const std::vector<bool>& dense_rows, const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  std::size_t off = 0, checked = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      EXPECT_EQ(gpu[i], static_cast<float>(ref[i])) << what << " lse row " << i;
      continue;
    }
    ASSERT_TRUE(std::isfinite(gpu[i])) << what << " lse row " << i << ": " << gpu[i];
    const bool close = std::abs(gpu[i] - ref[i]) <= 1e-4 * std::max(1.0, std::abs(ref[i]));
    if (!dense_rows.empty() && dense_rows[i]) {
      EXPECT_TRUE(close) << what << " lse row " << i << " (dense): " << gpu[i] << " vs " << ref[i];
    }
    off += close ? 0 : 1;
    ++checked;
  }
  EXPECT_LE(off, checked / 100) << what << ": " << off << " of " << checked
                                << " log-sum-exps off by more than 1e-4";
}

}  // namespace skipsoftmax::gpu
