// Event timing and small CUDA helpers shared by the benchmarks.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

#include "common/device_buffer.h"

namespace skipsoftmax::bench {

// common::check_cuda, named for the benchmarks.
inline void check(cudaError_t err, const char* what) { common::check_cuda(err, "benchmark", what); }

inline cudaDeviceProp device_properties() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  return prop;
}

// Times every arm round-robin: `rounds` rounds, each timing `iters` launches of every arm one
// after the other, so that clock and thermal drift fall on all arms alike; odd rounds take the
// arms in reverse order, so that no arm always follows the same one (the SM clock after a
// low-power arm favoured the arm after it: the guard measured 0.972x of dense at 8k with five
// launches an arm in forward order, 1.001x one launch at a time). Returns per arm the
// median of its rounds x iters event-timed launches, in milliseconds.
inline std::vector<double> interleaved_median_ms(const std::vector<std::function<void()>>& arms,
                                                 int warmup, int rounds, int iters) {
  if (rounds < 1 || iters < 1) throw std::invalid_argument("rounds and iters must be >= 1");
  for (const auto& launch : arms) {
    for (int i = 0; i < warmup; ++i) launch();
  }
  struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    Events() {
      check(cudaEventCreate(&a), "event");
      check(cudaEventCreate(&b), "event");
    }
    ~Events() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } ev;
  std::vector<std::vector<float>> times(arms.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < arms.size(); ++j) {
      const std::size_t k = r % 2 == 0 ? j : arms.size() - 1 - j;
      for (int i = 0; i < iters; ++i) {
        check(cudaEventRecord(ev.a), "record");
        arms[k]();
        check(cudaEventRecord(ev.b), "record");
        check(cudaEventSynchronize(ev.b), "sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, ev.a, ev.b), "elapsed");
        times[k].push_back(ms);
      }
    }
  }
  std::vector<double> medians;
  for (auto& t : times) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

}  // namespace skipsoftmax::bench
