// run_prefill_host: the prefill kernels on host tensors, for the tool and the tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../common/host_buffer.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {
namespace {

using Device = common::DeviceAllocation;

void check(cudaError_t err, const char* what) { common::check_cuda(err, "prefill", what); }

// [batch + 1] offsets from 0 to `total`, never decreasing, the longest step `longest`.
void check_offsets(const char* what, const std::vector<std::int32_t>& cu, int batch,
                   std::int64_t total, int longest) {
  common::expect_size("prefill", what, cu, std::int64_t{batch} + 1);
  const std::string name = std::string("prefill: ") + what;
  if (cu.front() != 0 || cu.back() != total) {
    throw std::invalid_argument(name + " must run from 0 to " + std::to_string(total) + ", got " +
                                std::to_string(cu.front()) + " to " + std::to_string(cu.back()));
  }
  int most = 0;
  for (int b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      throw std::invalid_argument(name + " decreases at entry " + std::to_string(b + 1));
    }
    most = std::max(most, cu[b + 1] - cu[b]);
  }
  if (most != longest) {
    throw std::invalid_argument(name + ": the longest sequence holds " + std::to_string(most) +
                                " tokens, the arguments' maximum is " + std::to_string(longest));
  }
}

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
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("prefill: " + why);
  }
  common::expect_size("prefill", "q", q, a.total_q * a.num_heads_q * a.head_dim);
  common::expect_size("prefill", "k", k, a.total_k * a.num_heads_kv * a.head_dim);
  common::expect_size("prefill", "v", v, a.total_k * a.num_heads_kv * a.head_dim);
  check_offsets("cu_seqlens_q", cu_seqlens_q, a.batch, a.total_q, a.max_seqlen_q);
  check_offsets("cu_seqlens_k", cu_seqlens_k, a.batch, a.total_k, a.max_seqlen_k);
}

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
  Device dstats(static_cast<std::size_t>(args.batch) * 2 * sizeof(unsigned long long));
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  dcu_q.upload(cu_seqlens_q);
  dcu_k.upload(cu_seqlens_k);
  check(cudaMemset(dstats.as<void>(), 0, static_cast<std::size_t>(args.batch) * 2 * 8), "memset");
  args.q = dq.as<void>();
  args.k = dk.as<void>();
  args.v = dv.as<void>();
  args.out = dout.as<void>();
  args.cu_seqlens_q = dcu_q.as<std::int32_t>();
  args.cu_seqlens_k = dcu_k.as<std::int32_t>();
  args.stats = dstats.as<unsigned long long>();

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  HostPrefillResult r;
  check(cudaEventRecord(start), "event");
  r.kernel = run_prefill(args, nullptr, nullptr);
  check(cudaEventRecord(stop), "event");
  check(cudaEventSynchronize(stop), "prefill");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  r.kernel_ms = ms;
  r.out.resize(q.size());
  check(cudaMemcpy(r.out.data(), dout.as<void>(), q.size() * 2, cudaMemcpyDeviceToHost),
        "copy out");
  r.stats.resize(static_cast<std::size_t>(args.batch) * 2);
  check(cudaMemcpy(r.stats.data(), dstats.as<void>(), r.stats.size() * 8, cudaMemcpyDeviceToHost),
        "copy stats");
  return r;
}

}  // namespace skipsoftmax
