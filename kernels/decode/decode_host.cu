// run_decode_host: the decode kernels on host tensors, for the tool and the tests.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "../common/host_buffer.h"
#include "skipsoftmax/decode.h"

namespace skipsoftmax {
namespace {

using Device = common::DeviceAllocation;

void check(cudaError_t err, const char* what) { common::check_cuda(err, "decode", what); }

}  // namespace

HostDecodeResult run_decode_host(DecodeArguments args, const std::vector<std::uint16_t>& q,
                                 const std::vector<std::uint16_t>& k_pages,
                                 const std::vector<std::uint16_t>& v_pages,
                                 const std::vector<std::int32_t>& page_table,
                                 const std::vector<std::int32_t>& seq_lens) {
  if (!hopper_gpu_available()) throw std::runtime_error("no Hopper GPU (compute capability 9.0)");
  Device dq(q.size() * 2), dout(q.size() * 2), dk(k_pages.size() * 2), dv(v_pages.size() * 2);
  Device dtable(page_table.size() * 4), dlens(seq_lens.size() * 4);
  Device dstats(static_cast<std::size_t>(args.batch) * 2 * sizeof(unsigned long long));
  dq.upload(q);
  dk.upload(k_pages);
  dv.upload(v_pages);
  dtable.upload(page_table);
  dlens.upload(seq_lens);
  check(cudaMemset(dstats.as<void>(), 0, static_cast<std::size_t>(args.batch) * 2 * 8), "memset");
  args.q = dq.as<void>();
  args.out = dout.as<void>();
  args.kv.k_pages = dk.as<void>();
  args.kv.v_pages = dv.as<void>();
  args.kv.page_table = dtable.as<std::int32_t>();
  args.seq_lens = dlens.as<std::int32_t>();
  args.stats = dstats.as<unsigned long long>();
  if (const std::string why = can_implement(args); !why.empty()) {
    throw std::invalid_argument("decode: " + why);
  }
  Device workspace(decode_workspace_size(args));

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  HostDecodeResult r;
  r.num_splits = decode_num_splits(args);
  check(cudaEventRecord(start), "event");
  r.kernel = run_decode(args, workspace.as<void>(), nullptr);
  check(cudaEventRecord(stop), "event");
  check(cudaEventSynchronize(stop), "decode");
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
