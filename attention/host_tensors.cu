// run_prefill_host and run_decode_host: the kernels on host tensors, for the tool and the tests.
// Each checks its host tensors against the arguments, uploads them, times the one launch with
// CUDA events and downloads the output and the tile statistics.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/device_buffer.h"
#include "host_checks.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {
namespace {

using Device = common::DeviceAllocation;

// The arguments and the host tensors, before any GPU work: the kernels trust both (a maximum
// below a sequence's length would leave its last query rows unwritten).
void check_host_inputs(PrefillArguments a, const std::vector<std::uint16_t>& q,
                       const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v,
                       const std::vector<std::int32_t>& cu_seqlens_q,
                       const std::vector<std::int32_t>& cu_seqlens_k) {
  if (a.paged_kv.k_pages != nullptr) {
    throw std::invalid_argument("prefill: run_prefill_host takes K and V as tensors, not pages");
  }
  a.q = a.k = a.v = common::unallocated();
  a.out = common::unallocated();
  a.cu_seqlens_q = a.cu_seqlens_k = static_cast<const std::int32_t*>(common::unallocated());
  if (a.lambdas) a.lambdas = static_cast<const float*>(common::unallocated());
  if (a.lse) a.lse = static_cast<float*>(common::unallocated());
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("prefill: " + why);
  }
  common::expect_size("prefill", "q", q, a.total_q * a.num_heads_q * a.head_dim);
  common::expect_size("prefill", "k", k, a.total_k * a.num_heads_kv * a.head_dim);
  common::expect_size("prefill", "v", v, a.total_k * a.num_heads_kv * a.head_dim);
  common::check_offsets("prefill", "cu_seqlens_q", cu_seqlens_q, a.batch, a.total_q,
                        a.max_seqlen_q);
  common::check_offsets("prefill", "cu_seqlens_k", cu_seqlens_k, a.batch, a.total_k,
                        a.max_seqlen_k);
}

// The arguments and the host tensors, before any GPU work: the kernels trust both (a length past
// its page-table row, or a page id outside the cache, would be read on the device).
void check_host_inputs(DecodeArguments a, const std::vector<std::uint16_t>& q,
                       const std::vector<std::uint16_t>& k_pages,
                       const std::vector<std::uint16_t>& v_pages,
                       const std::vector<std::int32_t>& page_table,
                       const std::vector<std::int32_t>& seq_lens) {
  a.q = a.kv.k_pages = a.kv.v_pages = common::unallocated();
  a.out = common::unallocated();
  a.kv.page_table = a.seq_lens = static_cast<const std::int32_t*>(common::unallocated());
  if (a.lambdas) a.lambdas = static_cast<const float*>(common::unallocated());
  if (a.lse) a.lse = static_cast<float*>(common::unallocated());
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("decode: " + why);
  }
  const std::int64_t rows = std::int64_t{a.batch} * a.q_len * a.num_heads_q;
  const std::int64_t cache = a.kv.num_pages * a.kv.page_size * a.num_heads_kv;
  common::expect_size("decode", "q", q, rows * a.head_dim);
  common::expect_size("decode", "k_pages", k_pages, cache * a.head_dim);
  common::expect_size("decode", "v_pages", v_pages, cache * a.head_dim);
  common::expect_size("decode", "page_table", page_table,
                      std::int64_t{a.batch} * a.kv.max_pages_per_seq);
  common::expect_size("decode", "seq_lens", seq_lens, a.batch);
  common::check_decode_lengths(a, page_table, seq_lens);
}

// The [batch, 2] tile counters (skipped, total) the kernels add to, zeroed.
struct StatsBuffer {
  explicit StatsBuffer(int batch, const char* family)
      : count(static_cast<std::size_t>(batch) * 2), device(count * sizeof(unsigned long long)) {
    common::check_cuda(cudaMemset(device.as<void>(), 0, count * sizeof(unsigned long long)), family,
                       "memset");
  }
  std::vector<unsigned long long> download(const char* family) const {
    std::vector<unsigned long long> host(count);
    common::check_cuda(cudaMemcpy(host.data(), device.as<void>(),
                                  count * sizeof(unsigned long long), cudaMemcpyDeviceToHost),
                       family, "copy stats");
    return host;
  }
  std::size_t count;
  Device device;
};

// Runs `launch` between two events on the default stream and waits for it: {what it returned (the
// kernel it chose), milliseconds}.
template <typename Launch>
std::pair<KernelChoice, float> timed(const char* family, Launch&& launch) {
  cudaEvent_t start, stop;
  common::check_cuda(cudaEventCreate(&start), family, "event");
  common::check_cuda(cudaEventCreate(&stop), family, "event");
  common::check_cuda(cudaEventRecord(start), family, "event");
  const KernelChoice kernel = launch();
  common::check_cuda(cudaEventRecord(stop), family, "event");
  common::check_cuda(cudaEventSynchronize(stop), family, family);
  float ms = 0;
  common::check_cuda(cudaEventElapsedTime(&ms, start, stop), family, "event");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return {kernel, ms};
}

template <typename T>
std::vector<T> download(const Device& from, std::size_t count, const char* family) {
  std::vector<T> host(count);
  common::check_cuda(
      cudaMemcpy(host.data(), from.as<void>(), count * sizeof(T), cudaMemcpyDeviceToHost), family,
      "copy out");
  return host;
}

// A launch's per-sequence lambdas (host, [batch]) on the device, and its log-sum-exp buffer
// ([rows], float32) where asked for; the arguments point at them.
struct LambdasAndLse {
  template <typename Arguments>
  LambdasAndLse(Arguments& a, std::size_t rows)
      : lambdas(a.lambdas ? a.batch * sizeof(float) : 0),
        lse(a.lse ? rows * sizeof(float) : 0),
        rows(a.lse ? rows : 0) {
    if (a.lambdas) {
      lambdas.upload(std::vector<float>(a.lambdas, a.lambdas + a.batch));
      a.lambdas = lambdas.as<const float>();
    }
    if (a.lse) a.lse = lse.as<float>();
  }
  std::vector<float> download_lse(const char* family) const {
    return rows ? download<float>(lse, rows, family) : std::vector<float>{};
  }
  Device lambdas, lse;
  std::size_t rows;
};

}  // namespace

HostPrefillResult run_prefill_host(PrefillArguments args, const std::vector<std::uint16_t>& q,
                                   const std::vector<std::uint16_t>& k,
                                   const std::vector<std::uint16_t>& v,
                                   const std::vector<std::int32_t>& cu_seqlens_q,
                                   const std::vector<std::int32_t>& cu_seqlens_k) {
  check_host_inputs(args, q, k, v, cu_seqlens_q, cu_seqlens_k);
  if (!hopper_gpu_available()) throw std::runtime_error("no Hopper GPU (compute capability 9.0)");
  Device dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dout(q.size() * 2);
  Device dcu_q(cu_seqlens_q.size() * 4), dcu_k(cu_seqlens_k.size() * 4);
  const StatsBuffer stats(args.batch, "prefill");
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  dcu_q.upload(cu_seqlens_q);
  dcu_k.upload(cu_seqlens_k);
  args.q = dq.as<void>();
  args.k = dk.as<void>();
  args.v = dv.as<void>();
  args.out = dout.as<void>();
  args.cu_seqlens_q = dcu_q.as<std::int32_t>();
  args.cu_seqlens_k = dcu_k.as<std::int32_t>();
  args.stats = stats.device.as<unsigned long long>();
  const LambdasAndLse extra(args, static_cast<std::size_t>(args.total_q) * args.num_heads_q);

  HostPrefillResult r;
  std::tie(r.kernel, r.kernel_ms) =
      timed("prefill", [&] { return run_prefill(args, nullptr, nullptr); });
  r.out = download<std::uint16_t>(dout, q.size(), "prefill");
  r.stats = stats.download("prefill");
  r.lse = extra.download_lse("prefill");
  return r;
}

HostDecodeResult run_decode_host(DecodeArguments args, const std::vector<std::uint16_t>& q,
                                 const std::vector<std::uint16_t>& k_pages,
                                 const std::vector<std::uint16_t>& v_pages,
                                 const std::vector<std::int32_t>& page_table,
                                 const std::vector<std::int32_t>& seq_lens) {
  check_host_inputs(args, q, k_pages, v_pages, page_table, seq_lens);
  if (!hopper_gpu_available()) throw std::runtime_error("no Hopper GPU (compute capability 9.0)");
  Device dq(q.size() * 2), dout(q.size() * 2), dk(k_pages.size() * 2), dv(v_pages.size() * 2);
  Device dtable(page_table.size() * 4), dlens(seq_lens.size() * 4);
  const StatsBuffer stats(args.batch, "decode");
  dq.upload(q);
  dk.upload(k_pages);
  dv.upload(v_pages);
  dtable.upload(page_table);
  dlens.upload(seq_lens);
  args.q = dq.as<void>();
  args.out = dout.as<void>();
  args.kv.k_pages = dk.as<void>();
  args.kv.v_pages = dv.as<void>();
  args.kv.page_table = dtable.as<std::int32_t>();
  args.seq_lens = dlens.as<std::int32_t>();
  args.stats = stats.device.as<unsigned long long>();
  const LambdasAndLse extra(args, q.size() / args.head_dim);
  const std::size_t workspace_bytes = decode_workspace_size(args);
  Device workspace(workspace_bytes);

  HostDecodeResult r;
  r.num_splits = decode_num_splits(args);
  std::tie(r.kernel, r.kernel_ms) = timed(
      "decode", [&] { return run_decode(args, workspace.as<void>(), workspace_bytes, nullptr); });
  r.out = download<std::uint16_t>(dout, q.size(), "decode");
  r.stats = stats.download("decode");
  r.lse = extra.download_lse("decode");
  return r;
}

}  // namespace skipsoftmax
