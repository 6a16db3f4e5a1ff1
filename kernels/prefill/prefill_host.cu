// run_prefill_host: the prefill kernels on host tensors, for the tool and the tests.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "../common/host_buffer.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {
namespace {

using Device = common::DeviceAllocation;

void check(cudaError_t err, const char* what) { common::check_cuda(err, "prefill", what); }

}  // namespace

HostPrefillResult run_prefill_host(PrefillArguments args, const std::vector<std::uint16_t>& q,
                                   const std::vector<std::uint16_t>& k,
                                   const std::vector<std::uint16_t>& v,
                                   const std::vector<std::int32_t>& cu_seqlens_q,
                                   const std::vector<std::int32_t>& cu_seqlens_k) {
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
