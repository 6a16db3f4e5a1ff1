// run_decode_host: the decode kernels on host tensors, for the tool and the tests.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "skipsoftmax/decode.h"

namespace skipsoftmax {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("decode: ") + what + ": " + cudaGetErrorString(err));
  }
}

// A device allocation freed on scope exit.
class Device {
 public:
  explicit Device(std::size_t bytes) { check(cudaMalloc(&ptr_, bytes ? bytes : 1), "cudaMalloc"); }
  ~Device() { cudaFree(ptr_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

template <typename T>
void upload(const Device& d, const std::vector<T>& host) {
  check(cudaMemcpy(d.as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "copy to device");
}

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
  upload(dq, q);
  upload(dk, k_pages);
  upload(dv, v_pages);
  upload(dtable, page_table);
  upload(dlens, seq_lens);
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
