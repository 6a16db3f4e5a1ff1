// The prefill kernels' sliding-window mask and their paged-KV history path, on the GPU, against
// the CPU reference and against the contiguous-KV kernels. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gpu_harness.h"

namespace skipsoftmax::gpu {
namespace {

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

bool compiled(DType t, int dim) {
  PrefillArguments probe;
  probe.dtype = t;
  probe.head_dim = dim;
  return can_implement(probe).find("this build has only") == std::string::npos;
}

// The KV of a batch scattered over shuffled pages; every slot no token owns holds NaN, and the
// page table's unused entries point at a page of NaN.
struct HostPages {
  int page_size = 0;
  std::int64_t num_pages = 0;
  int max_pages = 0;
  std::vector<std::uint16_t> k, v;        // [num_pages, page_size, hkv, dim]
  std::vector<std::int32_t> page_table;  // [batch, max_pages]
};

HostPages make_pages(const HostBatch& b, int page_size, std::uint64_t seed) {
  HostPages p;
  p.page_size = page_size;
  const std::size_t row = static_cast<std::size_t>(b.hkv) * b.dim;
  std::int64_t needed = 0;
  for (std::int64_t len : b.kv_lens) {
    const int n = static_cast<int>((len + page_size - 1) / page_size);
    needed += n;
    p.max_pages = std::max(p.max_pages, n);
  }
  p.num_pages = needed + 3;  // spare pages, the last of them the NaN page of unused entries
  std::vector<std::int32_t> order(static_cast<std::size_t>(p.num_pages - 1));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const std::size_t page_elems = static_cast<std::size_t>(page_size) * row;
  p.k.assign(static_cast<std::size_t>(p.num_pages) * page_elems, nan_bits(b.dtype));
  p.v = p.k;
  p.page_table.assign(b.kv_lens.size() * p.max_pages, static_cast<std::int32_t>(p.num_pages - 1));
  std::size_t next = 0;
  for (std::size_t s = 0; s < b.kv_lens.size(); ++s) {
    for (std::int64_t t = 0; t < b.kv_lens[s]; ++t) {
      if (t % page_size == 0) p.page_table[s * p.max_pages + t / page_size] = order[next++];
      const std::int32_t page = p.page_table[s * p.max_pages + t / page_size];
      const std::size_t dst = (static_cast<std::size_t>(page) * page_size + t % page_size) * row;
      const std::size_t src = (static_cast<std::size_t>(b.cu_k[s]) + t) * row;
      for (std::size_t i = 0; i < row; ++i) {
        p.k[dst + i] = to_bits(b.k[src + i], b.dtype);
        p.v[dst + i] = to_bits(b.v[src + i], b.dtype);
      }
    }
  }
  return p;
}

struct Launch {
  std::vector<std::uint16_t> bits;
  std::vector<double> out;
  std::vector<unsigned long long> stats;
};

// One launch; with `pages` the KV comes from the paged cache instead of the contiguous tensors.
Launch run_gpu(const HostBatch& b, const Threshold& th, int window, const HostPages* pages) {
  DeviceBatch d(b);
  DeviceBuffer stats(b.q_lens.size() * 2 * sizeof(unsigned long long));
  check(cudaMemset(stats.get(), 0, stats.bytes()), "memset");
  PrefillArguments a = prefill_args(b, d, true, th, KvOrder::kSinkThenReverse);
  a.window = window;
  a.stats = static_cast<unsigned long long*>(stats.get());
  std::optional<DeviceBuffer> kp, vp, table;
  if (pages) {
    kp.emplace(upload_bits(pages->k));
    vp.emplace(upload_bits(pages->v));
    table.emplace(pages->page_table.size() * 4);
    table->upload(pages->page_table);
    a.k = a.v = nullptr;
    a.paged_kv = {kp->get(), vp->get(), pages->num_pages, pages->page_size,
                  static_cast<const std::int32_t*>(table->get()), pages->max_pages};
  }
  run_prefill(a, nullptr, nullptr);
  check(cudaDeviceSynchronize(), "prefill");
  Launch r;
  const std::size_t n = static_cast<std::size_t>(d.total_q) * b.hq * b.dim;
  r.bits = d.out.download<std::uint16_t>(n);
  r.out.resize(n);
  for (std::size_t i = 0; i < n; ++i) r.out[i] = from_bits(r.bits[i], b.dtype);
  r.stats = stats.download<unsigned long long>(b.q_lens.size() * 2);
  return r;
}

std::vector<double> run_cpu(const HostBatch& b, const Threshold& th, int window) {
  ReferenceOptions o;
  o.threshold = th;
  o.tiles = prefill_vote_tiles(b.dim, KvOrder::kSinkThenReverse);
  PrefillProblem p = reference_problem(b, true);
  p.window = window;
  std::vector<double> out(b.q.size());
  reference_prefill(p, o, out.data());
  return out;
}

TEST(GpuPrefillWindow, SlidingWindowMatchesReference) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      // Whole prompts and a chunk with history; lengths off the tile multiples.
      const HostBatch b =
          make_host_batch(t, 4, 1, dim, {1, 200, 1300, 333}, {1, 200, 1300, 1800}, 17);
      for (int window : {1, 100, 512, 700, 4096}) {
        const Launch r = run_gpu(b, Threshold::dense(), window, nullptr);
        for (double x : r.out) ASSERT_FALSE(std::isnan(x)) << "window " << window;
        EXPECT_LT(rel_l2(r.out, run_cpu(b, Threshold::dense(), window)), tolerance(t))
            << to_string(t) << " d" << dim << " window " << window;
      }
    }
  }
}

TEST(GpuPrefillWindow, WindowWithASkipThresholdIsRefused) {
  alignas(16) static int dummy[4];
  PrefillArguments a;
  a.q = a.k = a.v = a.out = dummy;
  a.cu_seqlens_q = a.cu_seqlens_k = dummy;
  a.num_heads_q = a.num_heads_kv = 1;
  a.batch = a.max_seqlen_q = a.max_seqlen_k = 1;
  a.total_q = a.total_k = 1;
  a.window = 512;
  EXPECT_EQ(can_implement(a), "");
  a.threshold = Threshold::flat(1e-3);
  EXPECT_NE(can_implement(a).find("sliding-window"), std::string::npos) << can_implement(a);
  a.threshold = Threshold::dense();
  a.force_kernel = KernelChoice::kSkip;
  EXPECT_NE(can_implement(a).find("sliding-window"), std::string::npos) << can_implement(a);
}

TEST(GpuPrefillPaged, PagedHistoryIsBitIdenticalToContiguousKv) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      // Chunks over history, a whole prompt, and a one-token chunk; ragged and off-tile.
      const HostBatch b = make_host_batch(t, 6, 2, dim, {300, 1000, 1, 129}, {2100, 1000, 77, 900},
                                          23);
      for (int page_size : {16, 32, 64, 128}) {
        const HostPages pages = make_pages(b, page_size, 99 + page_size);
        for (const Threshold& th : {Threshold::dense(), Threshold::flat(3e-3)}) {
          const std::string what = std::string(to_string(t)) + " d" + std::to_string(dim) +
                                   " page " + std::to_string(page_size) + " " + th.describe();
          const Launch flat = run_gpu(b, th, 0, nullptr);
          const Launch paged = run_gpu(b, th, 0, &pages);
          EXPECT_TRUE(flat.bits == paged.bits) << what;
          EXPECT_EQ(flat.stats, paged.stats) << what;
          EXPECT_LT(rel_l2(paged.out, run_cpu(b, th, 0)), tolerance(t)) << what;
        }
      }
      // A local layer of a hybrid model: window and pages together.
      const HostPages pages = make_pages(b, 64, 5);
      const Launch r = run_gpu(b, Threshold::dense(), 512, &pages);
      EXPECT_LT(rel_l2(r.out, run_cpu(b, Threshold::dense(), 512)), tolerance(t));
    }
  }
}

TEST(GpuPrefillPaged, CanImplementChecksThePages) {
  PrefillArguments a;
  a.num_heads_q = a.num_heads_kv = 1;
  int dummy = 0;
  a.paged_kv.k_pages = a.paged_kv.v_pages = &dummy;
  a.paged_kv.page_table = &dummy;
  a.paged_kv.page_size = 48;
  a.q = a.out = &dummy;
  a.cu_seqlens_q = a.cu_seqlens_k = &dummy;
  EXPECT_NE(can_implement(a).find("page size 48"), std::string::npos) << can_implement(a);
}

}  // namespace
}  // namespace skipsoftmax::gpu
