// The one-pass calibration statistics against the CPU reference's actual skip decisions and mass
// share at several lambdas: prefill (ragged, chunked, windowed, every visit order) and paged
// split-KV decode, on lengths that are not tile multiples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "calibration.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"
#include "table_check.h"

namespace skipsoftmax {
namespace {

struct Batch {
  std::vector<float> q, k, v;
  PrefillProblem problem;
};

// Sequence i: the last q_lens[i] of kv_lens[i] positions of a structured synthetic sequence.
Batch make_batch(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens,
                 int hq, int hkv, int dim, std::uint64_t seed, std::int64_t window = 0) {
  Batch b;
  b.problem.cu_seqlens_q = {0};
  b.problem.cu_seqlens_k = {0};
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    SyntheticSpec spec{kv_lens[i], hq, hkv, dim};
    spec.seed = seed + i;
    const SyntheticQkv s = make_structured_qkv(spec);
    const std::size_t q_row = static_cast<std::size_t>(hq) * dim;
    b.q.insert(b.q.end(), s.q.end() - static_cast<std::ptrdiff_t>(q_lens[i] * q_row), s.q.end());
    b.k.insert(b.k.end(), s.k.begin(), s.k.end());
    b.v.insert(b.v.end(), s.v.begin(), s.v.end());
    b.problem.cu_seqlens_q.push_back(b.problem.cu_seqlens_q.back() + q_lens[i]);
    b.problem.cu_seqlens_k.push_back(b.problem.cu_seqlens_k.back() + kv_lens[i]);
  }
  b.problem.q = b.q.data();
  b.problem.k = b.k.data();
  b.problem.v = b.v.data();
  b.problem.num_heads_q = hq;
  b.problem.num_heads_kv = hkv;
  b.problem.head_dim = dim;
  b.problem.causal = true;
  b.problem.window = window;
  return b;
}

// Mass share per sequence from the statistics: skipped tiles' mass over the rows.
std::vector<double> mass_shares(const TileStats& st, const std::vector<double>& lambdas) {
  std::vector<double> share(st.kv_len.size(), 0.0);
  for (const StatsItem& it : st.items) {
    for (std::int64_t pos = 0; pos < it.tile_count; ++pos) {
      const std::size_t t = static_cast<std::size_t>(it.offset + pos);
      if (skipped_at(st.log_crit[t], lambdas[it.seq])) share[it.seq] += st.mass[t];
    }
  }
  for (std::size_t b = 0; b < share.size(); ++b) {
    share[b] = st.rows[b] ? share[b] / static_cast<double>(st.rows[b]) : 0.0;
  }
  return share;
}

// The statistics predict every decision of the reference's trace, and its mass share.
void expect_agreement(const TileStats& st, const std::vector<TileRecord>& trace,
                      const AttentionStats& ref, const char* what) {
  ASSERT_EQ(static_cast<std::int64_t>(trace.size()), st.tiles()) << what;
  std::vector<double> lambdas;
  for (const SequenceStats& s : ref.sequences) lambdas.push_back(s.lambda);
  std::int64_t skipped = 0, differ = 0;
  std::size_t t = 0;
  for (const StatsItem& it : st.items) {
    for (std::int64_t pos = 0; pos < it.tile_count; ++pos, ++t) {
      const TileRecord& r = trace[t];
      ASSERT_EQ(r.seq, it.seq) << what << " tile " << t;
      ASSERT_EQ(r.head, it.head) << what << " tile " << t;
      ASSERT_EQ(r.q_tile, it.q_tile) << what << " tile " << t;
      ASSERT_EQ(r.visit, pos) << what << " tile " << t;
      ASSERT_EQ(r.kv_tile, st.kv_tile(it, pos)) << what << " tile " << t;
      const bool predicted = skipped_at(st.log_crit[t], lambdas[it.seq]);
      differ += predicted != r.skipped;
      skipped += r.skipped;
    }
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << trace.size() << " decisions differ";
  EXPECT_EQ(skipped, ref.tiles_skipped) << what;
  const std::vector<double> share = mass_shares(st, lambdas);
  for (std::size_t b = 0; b < share.size(); ++b) {
    EXPECT_NEAR(share[b], ref.sequences[b].mass_share, 1e-12 + 1e-9 * share[b])
        << what << " sequence " << b;
  }
}

const std::vector<double> kLambdas = {1e-6, 1e-4, 1e-3, 1e-2, 0.1, 0.5};

void check_prefill(const Batch& b, const TileShape& tiles, const char* what) {
  StatsOptions so;
  so.tiles = tiles;
  const TileStats st = prefill_tile_stats(b.problem, so);
  std::vector<double> out(b.q.size());
  std::int64_t skipped_somewhere = 0;
  for (double lambda : kLambdas) {
    std::vector<TileRecord> trace;
    ReferenceOptions ro;
    ro.threshold = Threshold::flat(lambda);
    ro.tiles = tiles;
    ro.trace = &trace;
    const AttentionStats ref = reference_prefill(b.problem, ro, out.data());
    expect_agreement(st, trace, ref, what);
    skipped_somewhere += ref.tiles_skipped;
  }
  // Per-length lambdas through a table, each sequence its own.
  std::vector<TileRecord> trace;
  ReferenceOptions ro;
  ro.threshold = Threshold::table(ScaleTable({{1, 0.05}, {256, 3.0}, {600, 60.0}}));
  ro.tiles = tiles;
  ro.trace = &trace;
  expect_agreement(st, trace, reference_prefill(b.problem, ro, out.data()), what);
  EXPECT_GT(skipped_somewhere, 0) << what << ": the inputs must exercise the vote";
}

TEST(CalibrationStats, PrefillAgreesWithTheReferenceInEveryOrder) {
  // Ragged, chunked (kv > q), a one-token chunk, lengths off the tile grid, GQA.
  const Batch b = make_batch({333, 1, 130, 77}, {333, 700, 290, 77}, 4, 2, 32, 11);
  for (KvOrder order : {KvOrder::kSinkThenReverse, KvOrder::kReverse, KvOrder::kForward}) {
    check_prefill(b, {64, 128, order}, to_string(order));
  }
  check_prefill(b, {32, 64, KvOrder::kSinkThenReverse}, "32 x 64");
}

TEST(CalibrationStats, PrefillKernelTilesForHeadDim256) {
  const Batch b = make_batch({200}, {200}, 2, 1, 256, 5);
  check_prefill(b, prefill_vote_tiles(256, KvOrder::kSinkThenReverse), "d256");
}

TEST(CalibrationStats, PrefillSlidingWindow) {
  const Batch b = make_batch({400, 150}, {400, 390}, 2, 1, 32, 3, 96);
  check_prefill(b, {64, 32, KvOrder::kSinkThenReverse}, "window");
}

struct PagedBatch {
  std::vector<float> q, k_pages, v_pages;
  DecodeProblem problem;
};

// Decode steps of structured sequences, scattered over pages in a shuffled order.
PagedBatch make_paged(const std::vector<std::int64_t>& lens, int hq, int hkv, int dim,
                      int page_size, std::uint64_t seed) {
  PagedBatch pb;
  const std::int64_t max_pages =
      (*std::max_element(lens.begin(), lens.end()) + page_size - 1) / page_size;
  std::int64_t total_pages = 0;
  for (std::int64_t len : lens) total_pages += (len + page_size - 1) / page_size;
  std::vector<std::int32_t> perm(total_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::size_t row = static_cast<std::size_t>(hkv) * dim;
  pb.k_pages.assign(total_pages * page_size * row, 0.0f);
  pb.v_pages = pb.k_pages;
  PagedKvCache& kv = pb.problem.kv;
  kv.page_size = page_size;
  kv.num_pages = total_pages;
  kv.max_pages_per_seq = static_cast<int>(max_pages);
  kv.page_table.assign(lens.size() * max_pages, 0);
  std::int64_t next = 0;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    SyntheticSpec spec{lens[b], hq, hkv, dim};
    spec.seed = seed + b;
    const SyntheticQkv s = make_structured_qkv(spec);
    const std::size_t q_row = static_cast<std::size_t>(hq) * dim;
    pb.q.insert(pb.q.end(), s.q.end() - static_cast<std::ptrdiff_t>(q_row), s.q.end());
    for (std::int64_t t = 0; t < lens[b]; ++t) {
      if (t % page_size == 0) kv.page_table[b * max_pages + t / page_size] = perm[next++];
      const std::int64_t slot =
          std::int64_t{kv.page_table[b * max_pages + t / page_size]} * page_size + t % page_size;
      std::copy_n(&s.k[t * row], row, &pb.k_pages[slot * row]);
      std::copy_n(&s.v[t * row], row, &pb.v_pages[slot * row]);
    }
    kv.seq_lens.push_back(lens[b]);
  }
  pb.problem.q = pb.q.data();
  kv.k_pages = pb.k_pages.data();
  kv.v_pages = pb.v_pages.data();
  pb.problem.num_heads_q = hq;
  pb.problem.num_heads_kv = hkv;
  pb.problem.head_dim = dim;
  return pb;
}

TEST(CalibrationStats, DecodeAgreesWithTheReferenceWithSplits) {
  const PagedBatch pb = make_paged({1, 100, 700, 1025, 333}, 8, 2, 32, 16, 21);
  for (int splits : {1, 3}) {
    for (int tile_k : {64, 128}) {
      StatsOptions so;
      so.tiles.tile_k = tile_k;
      so.num_splits = splits;
      const TileStats st = decode_tile_stats(pb.problem, so);
      std::vector<double> out(pb.q.size());
      std::int64_t skipped_somewhere = 0;
      for (double lambda : kLambdas) {
        std::vector<TileRecord> trace;
        ReferenceOptions ro;
        ro.threshold = Threshold::flat(lambda);
        ro.tiles.tile_k = tile_k;
        ro.num_splits = splits;
        ro.trace = &trace;
        const AttentionStats ref = reference_decode(pb.problem, ro, out.data());
        expect_agreement(st, trace, ref, "decode");
        skipped_somewhere += ref.tiles_skipped;
      }
      EXPECT_GT(skipped_somewhere, 0);
    }
  }
  DecodeProblem multi = pb.problem;  // calibration votes one new token per sequence
  multi.q_len = 2;
  EXPECT_THROW(decode_tile_stats(multi, StatsOptions{}), std::invalid_argument);
}

// check-tables counts, at each sequence's own lambda of a table (the guard included), exactly the
// tiles the reference visits and skips.
TEST(CalibrationStats, CountSkippedIsTheReferenceCountUnderATable) {
  const ScaleTable table({{256, 3.0}, {600, 60.0}});  // sequences under 256 keys: dense
  const Batch b = make_batch({200, 300, 120, 700}, {200, 300, 500, 700}, 4, 2, 32, 7);
  const TileShape tiles{64, 128, KvOrder::kSinkThenReverse};
  StatsOptions so;
  so.tiles = tiles;
  ReferenceOptions ro;
  ro.threshold = Threshold::table(table);
  ro.tiles = tiles;
  std::vector<double> out(b.q.size());
  const AttentionStats ref = reference_prefill(b.problem, ro, out.data());
  const TileCount prefill = count_skipped(prefill_tile_stats(b.problem, so), table);
  EXPECT_EQ(prefill.visited, static_cast<std::uint64_t>(ref.tiles_total));
  EXPECT_EQ(prefill.skipped, static_cast<std::uint64_t>(ref.tiles_skipped));
  EXPECT_GT(prefill.skipped, 0u);
  EXPECT_EQ(count_skipped(prefill_tile_stats(b.problem, so), ScaleTable()).skipped, 0u);

  const PagedBatch pb = make_paged({100, 333, 700, 1025}, 8, 2, 32, 16, 5);
  StatsOptions dso;
  dso.tiles.tile_k = 64;
  dso.num_splits = 2;
  ReferenceOptions dro;
  dro.threshold = Threshold::table(table);
  dro.tiles.tile_k = 64;
  dro.num_splits = 2;
  std::vector<double> dout(pb.q.size());
  const AttentionStats dref = reference_decode(pb.problem, dro, dout.data());
  const TileCount decode = count_skipped(decode_tile_stats(pb.problem, dso), table);
  EXPECT_EQ(decode.visited, static_cast<std::uint64_t>(dref.tiles_total));
  EXPECT_EQ(decode.skipped, static_cast<std::uint64_t>(dref.tiles_skipped));
  EXPECT_GT(decode.skipped, 0u);
}

TEST(CalibrationStats, FirstVisitedTileNeverSkips) {
  const Batch b = make_batch({300}, {300}, 1, 1, 32, 2);
  StatsOptions so;
  so.tiles = {64, 64, KvOrder::kSinkThenReverse};
  const TileStats st = prefill_tile_stats(b.problem, so);
  for (const StatsItem& it : st.items) EXPECT_EQ(st.log_crit[it.offset], 0.0);
  // Every row's mass adds up to one over its tiles.
  const double total = std::accumulate(st.mass.begin(), st.mass.end(), 0.0);
  EXPECT_NEAR(total, static_cast<double>(st.rows[0]), 1e-9 * total);
  EXPECT_EQ(st.rows[0], 300);
}

TEST(CalibrationStats, HistogramMatchesTheTilesItPools) {
  const Batch b = make_batch({513, 200}, {513, 200}, 2, 1, 32, 8);
  StatsOptions so;
  so.tiles = {64, 128, KvOrder::kSinkThenReverse};
  const TileStats st = prefill_tile_stats(b.problem, so);
  CriticalHistogram pooled;
  for (const CriticalHistogram& h : sequence_histograms(st)) pooled.merge(h);
  EXPECT_EQ(pooled.tiles(), st.tiles());
  EXPECT_EQ(pooled.min_kv_len(), 200);
  for (double scale : {0.01, 0.3, 2.0, 20.0, 150.0}) {
    std::int64_t below = 0, at_edges = 0;
    for (const StatsItem& it : st.items) {
      for (std::int64_t pos = 0; pos < it.tile_count; ++pos) {
        const std::size_t t = static_cast<std::size_t>(it.offset + pos);
        const double lambda = scale / static_cast<double>(st.kv_len[it.seq]);
        below += lambda < 1.0 && skipped_at(st.log_crit[t], lambda);
        // Tiles within one bucket of the scale may fall either side of the interpolation.
        const double u = st.log_crit[t] + std::log(double(st.kv_len[it.seq]));
        at_edges += std::abs(u - std::log(scale)) <= 1.0 / CriticalHistogram::kPerNat;
      }
    }
    EXPECT_NEAR(pooled.sparsity_at(scale) * double(st.tiles()), double(below),
                double(at_edges) + 1e-9)
        << "S = " << scale;
  }
  const CriticalHistogram back = CriticalHistogram::from_json(pooled.to_json(), "test");
  EXPECT_EQ(back, pooled);
}

}  // namespace
}  // namespace skipsoftmax
