// run_decode_host: the decode kernels on host tensors, for the tool and the tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../common/host_buffer.h"
#include "skipsoftmax/decode.h"

namespace skipsoftmax {
namespace {

using Device = common::DeviceAllocation;

void check(cudaError_t err, const char* what) { common::check_cuda(err, "decode", what); }

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
  std::int32_t longest = 0;
  for (int b = 0; b < a.batch; ++b) {
    const std::int32_t len = seq_lens[b];
    if (len < a.q_len || len > a.max_seq_len) {
      throw std::invalid_argument(
          "decode: seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
          " lies outside [q_len, max_seq_len] = [" + std::to_string(a.q_len) + ", " +
          std::to_string(a.max_seq_len) + "]");
    }
    longest = std::max(longest, len);
    for (std::int32_t i = 0; i < (len + a.kv.page_size - 1) / a.kv.page_size; ++i) {
      const std::int32_t page = page_table[std::size_t(b) * a.kv.max_pages_per_seq + i];
      if (page < 0 || page >= a.kv.num_pages) {
        throw std::invalid_argument("decode: page_table[" + std::to_string(b) + "][" +
                                    std::to_string(i) + "] = " + std::to_string(page) +
                                    " lies outside the cache's " + std::to_string(a.kv.num_pages) +
                                    " pages");
      }
    }
  }
  if (longest != a.max_seq_len) {
    throw std::invalid_argument("decode: max_seq_len (" + std::to_string(a.max_seq_len) +
                                ") is not the longest seq_lens entry (" + std::to_string(longest) +
                                ")");
  }
}

}  // namespace

HostDecodeResult run_decode_host(DecodeArguments args, const std::vector<std::uint16_t>& q,
                                 const std::vector<std::uint16_t>& k_pages,
                                 const std::vector<std::uint16_t>& v_pages,
                                 const std::vector<std::int32_t>& page_table,
                                 const std::vector<std::int32_t>& seq_lens) {
  check_host_inputs(args, q, k_pages, v_pages, page_table, seq_lens);
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
  const std::size_t workspace_bytes = decode_workspace_size(args);
  Device workspace(workspace_bytes);

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  HostDecodeResult r;
  r.num_splits = decode_num_splits(args);
  check(cudaEventRecord(start), "event");
  r.kernel = run_decode(args, workspace.as<void>(), workspace_bytes, nullptr);
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
