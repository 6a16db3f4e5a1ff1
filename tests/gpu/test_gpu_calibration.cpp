// The calibration statistics pass on the GPU (fp32 from fp32 or bf16 inputs) against the CPU pass
// (float64): tile by tile, and as pooled curves. Skipped cleanly without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "calibration.h"
#include "calibration_cuda.h"
#include "gpu_harness.h"

namespace skipsoftmax::gpu {
namespace {

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

// Tile-by-tile agreement, allowing fp32 rounding: a tile whose row maximum ties the running one
// within rounding may record 0 on one side and a tiny negative gap on the other.
void expect_close(const TileStats& gpu, const TileStats& cpu, const char* what) {
  ASSERT_EQ(gpu.tiles(), cpu.tiles()) << what;
  ASSERT_EQ(gpu.rows, cpu.rows) << what;
  ASSERT_EQ(gpu.kv_len, cpu.kv_len) << what;
  std::int64_t far = 0;
  double mass_err = 0.0;
  for (std::int64_t t = 0; t < cpu.tiles(); ++t) {
    const double a = gpu.log_crit[t], b = cpu.log_crit[t];
    const bool same = (a == b) || std::abs(a - b) <= 2e-3 * (1.0 + std::abs(b));
    far += !same;
    mass_err = std::max(mass_err, std::abs(gpu.mass[t] - cpu.mass[t]) / (1.0 + cpu.mass[t]));
  }
  std::printf(
      "%s: %lld of %lld tiles differ in critical lambda beyond rounding; max mass error "
      "%.2e\n",
      what, static_cast<long long>(far), static_cast<long long>(cpu.tiles()), mass_err);
  EXPECT_LE(far, std::max<std::int64_t>(1, cpu.tiles() / 200)) << what;
  EXPECT_LT(mass_err, 1e-4) << what;
  CriticalHistogram hg, hc;
  for (const CriticalHistogram& h : sequence_histograms(gpu)) hg.merge(h);
  for (const CriticalHistogram& h : sequence_histograms(cpu)) hc.merge(h);
  for (double s : {1.0, 10.0, 100.0, 1000.0}) {
    EXPECT_NEAR(hg.sparsity_at(s), hc.sparsity_at(s), 5e-3) << what << " S = " << s;
    EXPECT_NEAR(hg.mass_share_at(s), hc.mass_share_at(s), 1e-4) << what << " S = " << s;
  }
}

TEST(GpuCalibration, PrefillMatchesTheCpuPass) {
  REQUIRE_HOPPER();
  for (int dim : {64, 128, 256}) {
    // Ragged and chunked, lengths off the tile grid.
    const HostBatch b =
        make_host_batch(DType::kBF16, 4, 2, dim, {700, 1, 333}, {1100, 513, 333}, 5);
    StatsOptions so;
    so.tiles = prefill_vote_tiles(dim, KvOrder::kSinkThenReverse);
    const PrefillProblem p = reference_problem(b, true);
    const TileStats cpu = prefill_tile_stats(p, so);
    expect_close(prefill_tile_stats_cuda(p, so), cpu, "prefill fp32");

    // The same values as bf16 bits on the device.
    const DeviceBuffer q = upload_bits(padded_bits(b.q, 0, 0, DType::kBF16));
    const DeviceBuffer k = upload_bits(padded_bits(b.k, 0, 0, DType::kBF16));
    const TileStats bf16 =
        prefill_tile_stats_device(p, {StatsDtype::kBF16, q.get(), k.get()}, so, nullptr);
    expect_close(bf16, cpu, "prefill bf16");
  }
}

TEST(GpuCalibration, DecodeWithSplitsMatchesTheCpuPass) {
  REQUIRE_HOPPER();
  const int hq = 8, hkv = 2, dim = 128;
  const std::vector<std::int64_t> lens = {1, 100, 4097, 2000};
  // Each decode step is the last token of a structured sequence, its keys in shuffled pages.
  const int page = 16;
  std::vector<float> q, k_pages;
  DecodeProblem p;
  p.num_heads_q = hq;
  p.num_heads_kv = hkv;
  p.head_dim = dim;
  std::int64_t max_pages = 0, pages = 0;
  for (std::int64_t len : lens) max_pages = std::max(max_pages, (len + page - 1) / page);
  for (std::int64_t len : lens) pages += (len + page - 1) / page;
  const std::size_t row = static_cast<std::size_t>(hkv) * dim;
  k_pages.assign(pages * page * row, 0.0f);
  p.kv.page_size = page;
  p.kv.num_pages = pages;
  p.kv.max_pages_per_seq = static_cast<int>(max_pages);
  p.kv.page_table.assign(lens.size() * max_pages, 0);
  std::int64_t next = pages - 1;  // pages handed out backwards
  for (std::size_t b = 0; b < lens.size(); ++b) {
    SyntheticSpec spec{lens[b], hq, hkv, dim};
    spec.seed = 40 + b;
    const SyntheticQkv s = make_structured_qkv(spec);
    q.insert(q.end(), s.q.end() - static_cast<std::ptrdiff_t>(hq * dim), s.q.end());
    for (std::int64_t t = 0; t < lens[b]; ++t) {
      if (t % page == 0) p.kv.page_table[b * max_pages + t / page] = static_cast<int>(next--);
      const std::int64_t slot = p.kv.page_table[b * max_pages + t / page] * page + t % page;
      std::copy_n(&s.k[t * row], row, &k_pages[slot * row]);
    }
    p.kv.seq_lens.push_back(lens[b]);
  }
  p.q = q.data();
  p.kv.k_pages = k_pages.data();
  for (int splits : {1, 4}) {
    StatsOptions so;
    so.tiles.tile_k = 64;
    so.num_splits = splits;
    expect_close(decode_tile_stats_cuda(p, so), decode_tile_stats(p, so),
                 splits == 1 ? "decode" : "decode, 4 splits");
  }
}

TEST(GpuCalibration, RejectsShapesItCannotRun) {
  REQUIRE_HOPPER();
  const HostBatch b = make_host_batch(DType::kBF16, 2, 1, 64, {100}, {100}, 1);
  StatsOptions so;
  so.tiles = {128, 128, KvOrder::kForward};  // more than 64 rows per vote
  EXPECT_THROW(prefill_tile_stats_cuda(reference_problem(b, true), so), std::invalid_argument);
  so.tiles = {64, 96, KvOrder::kForward};
  EXPECT_THROW(prefill_tile_stats_cuda(reference_problem(b, true), so), std::invalid_argument);
}

}  // namespace
}  // namespace skipsoftmax::gpu
