// A minimal thread pool loop for the CPU reference and the CPU calibration pass.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace skipsoftmax {

// Threads for `items` work items: num_threads (all hardware threads when it is 0 or negative),
// never more than the items, since callers keep a scratch buffer per thread.
inline int resolve_threads(int num_threads, std::int64_t items) {
  const int asked = num_threads > 0
                        ? num_threads
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(asked, items)));
}

// Runs body(item, thread_index) for item in [0, n) on num_threads threads (0: all), the items
// handed out in increasing index order (callers order items from the most expensive down).
template <typename Body>
void parallel_for(std::int64_t n, int num_threads, const Body& body) {
  const int threads = resolve_threads(num_threads, n);
  std::atomic<std::int64_t> next{0};
  auto worker = [&](int tid) {
    for (std::int64_t i = next++; i < n; i = next++) body(i, tid);
  };
  if (threads == 1) {
    worker(0);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (std::thread& th : pool) th.join();
}

}  // namespace skipsoftmax
