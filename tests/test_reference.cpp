// The CPU reference against a naive float64 attention, and the BLASST properties it must hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "skipsoftmax/reference.h"
#include "synthetic.h"

namespace skipsoftmax {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A packed ragged batch with the synthetic real-structure inputs, one sequence after another.
struct Batch {
  std::vector<float> q, k, v;
  PrefillProblem problem;
};

Batch make_batch(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens,
                 int hq, int hkv, int dim, bool causal, std::uint64_t seed) {
  Batch b;
  b.problem.cu_seqlens_q = {0};
  b.problem.cu_seqlens_k = {0};
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    SyntheticSpec spec{kv_lens[i], hq, hkv, dim};
    spec.seed = seed + i;
    const SyntheticQkv s = make_structured_qkv(spec);
    // The queries of a chunk are the last q_len positions of its sequence.
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
  b.problem.causal = causal;
  return b;
}

std::size_t out_size(const PrefillProblem& p) {
  return static_cast<std::size_t>(p.cu_seqlens_q.back()) * p.num_heads_q * p.head_dim;
}

// Scores of one (sequence, head) as a dense [q_len][kv_len] matrix, -inf where masked.
std::vector<std::vector<double>> naive_scores(const PrefillProblem& p, std::size_t seq, int head) {
  const std::int64_t q0 = p.cu_seqlens_q[seq], k0 = p.cu_seqlens_k[seq];
  const std::int64_t lq = p.cu_seqlens_q[seq + 1] - q0, lk = p.cu_seqlens_k[seq + 1] - k0;
  const int dim = p.head_dim, kvh = head / (p.num_heads_q / p.num_heads_kv);
  const double scale = p.softmax_scale.value_or(1.0 / std::sqrt(double(dim)));
  std::vector<std::vector<double>> s(lq, std::vector<double>(lk));
  for (std::int64_t i = 0; i < lq; ++i) {
    for (std::int64_t j = 0; j < lk; ++j) {
      const std::int64_t pos = lk - lq + i;
      if ((p.causal && j > pos) || (p.window > 0 && j <= pos - p.window)) {
        s[i][j] = -std::numeric_limits<double>::infinity();
        continue;
      }
      const float* qr = p.q + ((q0 + i) * p.num_heads_q + head) * dim;
      const float* kr = p.k + ((k0 + j) * p.num_heads_kv + kvh) * dim;
      double acc = 0.0;
      for (int d = 0; d < dim; ++d) acc += double(qr[d]) * double(kr[d]);
      s[i][j] = acc * scale;
    }
  }
  return s;
}

// Plain softmax(S) V in float64: the independent oracle for the tiled reference; with lse, also
// each row's natural log-sum-exp, [total_q, hq].
std::vector<double> naive_attention(const PrefillProblem& p, std::vector<double>* lse = nullptr) {
  std::vector<double> out(out_size(p));
  if (lse) lse->assign(static_cast<std::size_t>(p.cu_seqlens_q.back()) * p.num_heads_q, 0.0);
  const int dim = p.head_dim, group = p.num_heads_q / p.num_heads_kv;
  for (std::size_t b = 0; b + 1 < p.cu_seqlens_q.size(); ++b) {
    for (int h = 0; h < p.num_heads_q; ++h) {
      const auto s = naive_scores(p, b, h);
      for (std::size_t i = 0; i < s.size(); ++i) {
        const double m = *std::max_element(s[i].begin(), s[i].end());
        double l = 0.0;
        std::vector<double> o(dim, 0.0);
        for (std::size_t j = 0; j < s[i].size(); ++j) {
          const double w = std::exp(s[i][j] - m);
          l += w;
          const float* vr = p.v + ((p.cu_seqlens_k[b] + j) * p.num_heads_kv + h / group) * dim;
          for (int d = 0; d < dim; ++d) o[d] += w * vr[d];
        }
        double* dst = &out[((p.cu_seqlens_q[b] + i) * p.num_heads_q + h) * dim];
        for (int d = 0; d < dim; ++d) dst[d] = o[d] / l;
        if (lse) (*lse)[(p.cu_seqlens_q[b] + i) * p.num_heads_q + h] = m + std::log(l);
      }
    }
  }
  return out;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

ReferenceOptions options(Threshold th, int tile_q = 128, int tile_k = 128,
                         KvOrder order = KvOrder::kForward) {
  ReferenceOptions o;
  o.threshold = th;
  o.tiles = {tile_q, tile_k, order};
  return o;
}

std::vector<double> run(const PrefillProblem& p, const ReferenceOptions& o,
                        AttentionStats* stats = nullptr) {
  std::vector<double> out(out_size(p), kNaN);
  AttentionStats s = reference_prefill(p, o, out.data());
  if (stats) *stats = std::move(s);
  return out;
}

TEST(ReferencePrefill, DenseMatchesNaiveOnAwkwardLengths) {
  for (bool causal : {false, true}) {
    for (std::int64_t len : {1, 127, 128, 129, 300}) {
      Batch b = make_batch({len}, {len}, 4, 2, 32, causal, 7);
      const auto out = run(b.problem, options(Threshold::dense()));
      EXPECT_LT(rel_l2(out, naive_attention(b.problem)), 1e-13) << "len " << len;
    }
  }
}

TEST(ReferencePrefill, DenseMatchesNaiveAt4097) {
  Batch b = make_batch({4097}, {4097}, 1, 1, 16, true, 11);
  EXPECT_LT(rel_l2(run(b.problem, options(Threshold::dense())), naive_attention(b.problem)), 1e-13);
}

TEST(ReferencePrefill, GqaMqaRaggedChunkedMatchNaive) {
  // Ragged mix with history: q_len < kv_len is a chunk attending to the last q_len positions.
  Batch gqa = make_batch({1, 129, 64, 200}, {1, 300, 64, 457}, 8, 2, 64, true, 3);
  EXPECT_LT(
      rel_l2(run(gqa.problem, options(Threshold::dense(), 64, 32)), naive_attention(gqa.problem)),
      1e-13);
  Batch mqa = make_batch({33, 7}, {190, 7}, 6, 1, 16, false, 4);
  mqa.problem.softmax_scale = 0.3;
  EXPECT_LT(
      rel_l2(run(mqa.problem, options(Threshold::dense(), 16, 16)), naive_attention(mqa.problem)),
      1e-13);
}

TEST(ReferencePrefill, SlidingWindowMatchesNaive) {
  for (std::int64_t window : {1, 64, 200, 1000}) {
    // A chunk with history (300 of 700) and whole sequences, off every tile multiple.
    Batch b = make_batch({1, 129, 300, 700}, {1, 129, 700, 700}, 4, 2, 32, true, 91);
    b.problem.window = window;
    EXPECT_LT(
        rel_l2(run(b.problem, options(Threshold::dense(), 64, 64)), naive_attention(b.problem)),
        1e-13)
        << "window " << window;
  }
}

TEST(ReferencePrefill, SlidingWindowVisitsOnlyTheTilesInReach) {
  EXPECT_EQ(prefill_kv_tile_range(256, 384, 1000, 1000, true, 100, 128).begin, 1);  // key 157
  EXPECT_EQ(prefill_kv_tile_range(256, 384, 1000, 1000, true, 100, 128).end, 3);
  EXPECT_EQ(prefill_kv_tile_range(0, 128, 1000, 1000, true, 100, 128).begin, 0);
  EXPECT_EQ(prefill_kv_tile_range(0, 64, 64, 1000, true, 64, 128).begin, 6);  // key 873
  Batch b = make_batch({1000}, {1000}, 1, 1, 16, true, 93);
  b.problem.window = 100;
  AttentionStats s;
  run(b.problem, options(Threshold::dense(), 128, 128), &s);
  std::int64_t expected = 0;
  for (std::int64_t q0 = 0; q0 < 1000; q0 += 128) {
    const TileRange r = prefill_kv_tile_range(q0, std::min<std::int64_t>(q0 + 128, 1000), 1000,
                                              1000, true, 100, 128);
    expected += r.end - r.begin;
  }
  EXPECT_EQ(s.tiles_total, expected);
  EXPECT_LT(expected, 8 * 9 / 2);  // fewer than the causal triangle
}

TEST(ReferencePrefill, GuardedLambdaZeroIsBitIdenticalToDense) {
  Batch b = make_batch({700, 333}, {700, 333}, 4, 2, 32, true, 5);
  // The table's first bin lies above both lengths: the skip path runs with lambda = 0.
  const Threshold guarded = Threshold::table(ScaleTable({{4096, 10.0}}));
  AttentionStats stats;
  const auto skip = run(b.problem, options(guarded, 64, 64), &stats);
  EXPECT_EQ(stats.tiles_skipped, 0);
  EXPECT_TRUE(bit_equal(skip, run(b.problem, options(Threshold::dense(), 64, 64))));
  // S >= L guards too.
  const Threshold big_s = Threshold::table(ScaleTable({{1, 1000.0}}));
  EXPECT_TRUE(bit_equal(run(b.problem, options(big_s, 64, 64)),
                        run(b.problem, options(Threshold::dense(), 64, 64))));
}

TEST(ReferencePrefill, SparsityNeverDecreasesAsLambdaGrows) {
  Batch b = make_batch({1500}, {1500}, 2, 1, 64, true, 9);
  double last = -1.0;
  for (double lambda : {1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9}) {
    AttentionStats s;
    run(b.problem, options(Threshold::flat(lambda), 64, 64), &s);
    EXPECT_GE(s.sparsity(), last) << "lambda " << lambda;
    last = s.sparsity();
  }
  EXPECT_GT(last, 0.3) << "structured inputs must give skippable tiles";
}

// For every skipped tile, recompute its scores and check that each weight, relative to the row's
// final maximum, lies below lambda; and that the reported mass share is the share of those tiles.
void check_skipped_weights_and_mass(const PrefillProblem& p, const ReferenceOptions& o) {
  std::vector<TileRecord> trace;
  ReferenceOptions opt = o;
  opt.trace = &trace;
  AttentionStats stats;
  run(p, opt, &stats);
  ASSERT_EQ(static_cast<std::int64_t>(trace.size()), stats.tiles_total);
  const int tq = o.tiles.tile_q, tk = o.tiles.tile_k;
  std::int64_t skipped = 0;
  for (std::size_t seq = 0; seq + 1 < p.cu_seqlens_q.size(); ++seq) {
    const double lambda = stats.sequences[seq].lambda;
    double share_sum = 0.0;
    std::int64_t rows = 0;
    for (int h = 0; h < p.num_heads_q; ++h) {
      const auto s = naive_scores(p, seq, h);
      std::vector<double> skipped_mass(s.size(), 0.0), total_mass(s.size(), 0.0);
      std::vector<double> row_max(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) {
        row_max[i] = *std::max_element(s[i].begin(), s[i].end());
        for (double x : s[i]) total_mass[i] += std::exp(x - row_max[i]);
      }
      for (const TileRecord& r : trace) {
        if (r.seq != static_cast<std::int64_t>(seq) || r.head != h || !r.skipped) continue;
        ++skipped;
        for (std::int64_t i = r.q_tile * tq;
             i < std::min<std::int64_t>((r.q_tile + 1) * tq, std::ssize(s)); ++i) {
          for (std::int64_t j = r.kv_tile * tk;
               j < std::min<std::int64_t>((r.kv_tile + 1) * tk, std::ssize(s[i])); ++j) {
            const double w = std::exp(s[i][j] - row_max[i]);
            EXPECT_LT(w, lambda) << "seq " << seq << " head " << h << " row " << i << " key " << j;
            skipped_mass[i] += w;
          }
        }
      }
      for (std::size_t i = 0; i < s.size(); ++i) {
        share_sum += skipped_mass[i] / total_mass[i];
        ++rows;
      }
    }
    EXPECT_NEAR(stats.sequences[seq].mass_share, share_sum / double(rows), 1e-12);
  }
  EXPECT_EQ(skipped, stats.tiles_skipped);
  EXPECT_GT(skipped, 0);
}

TEST(ReferencePrefill, SkippedWeightsAreBelowLambdaAndMassIsTheirShare) {
  Batch b = make_batch({900, 400}, {1200, 400}, 4, 2, 32, true, 13);
  for (KvOrder order : {KvOrder::kForward, KvOrder::kReverse, KvOrder::kSinkThenReverse}) {
    check_skipped_weights_and_mass(b.problem, options(Threshold::flat(1e-3), 64, 64, order));
  }
  check_skipped_weights_and_mass(b.problem,
                                 options(Threshold::table(ScaleTable({{256, 2.0}})), 32, 64));
}

TEST(ReferencePrefill, SlidingWindowSkipsHoldTheBound) {
  Batch b = make_batch({1500}, {1500}, 2, 1, 32, true, 95);
  b.problem.window = 700;
  for (KvOrder order : {KvOrder::kForward, KvOrder::kSinkThenReverse}) {
    check_skipped_weights_and_mass(b.problem, options(Threshold::flat(1e-2), 64, 64, order));
  }
}

TEST(ReferencePrefill, ErrorIsBoundedByTheSkippedMass) {
  Batch b = make_batch({1024}, {1024}, 2, 2, 64, true, 17);
  const auto dense = run(b.problem, options(Threshold::dense(), 64, 64));
  AttentionStats s;
  const auto skip = run(b.problem, options(Threshold::flat(1e-2), 64, 64), &s);
  ASSERT_GT(s.tiles_skipped, 0);
  // O_dense = (1 - m) O_skip + m O_skipped per row, so |O_skip - O_dense| <= m * 2 max|v|.
  const float vmax = std::abs(*std::max_element(
      b.v.begin(), b.v.end(), [](float x, float y) { return std::abs(x) < std::abs(y); }));
  for (std::size_t i = 0; i < dense.size(); ++i) {
    EXPECT_LE(std::abs(skip[i] - dense[i]), 2.0 * s.sequences[0].mass_share_max * vmax + 1e-12);
  }
}

TEST(ReferencePrefill, RaggedBatchEqualsPerSequenceRuns) {
  const std::vector<std::int64_t> q_lens = {129, 1, 300, 64}, kv_lens = {129, 50, 700, 64};
  Batch all = make_batch(q_lens, kv_lens, 4, 2, 32, true, 21);
  const ReferenceOptions o = options(Threshold::flat(1e-3), 64, 64, KvOrder::kSinkThenReverse);
  AttentionStats all_stats;
  const auto out = run(all.problem, o, &all_stats);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    Batch one = make_batch({q_lens[i]}, {kv_lens[i]}, 4, 2, 32, true, 21 + i);
    AttentionStats s;
    const auto part = run(one.problem, o, &s);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), out.begin() + offset)) << "sequence " << i;
    EXPECT_EQ(s.sequences[0].tiles_skipped, all_stats.sequences[i].tiles_skipped);
    offset += part.size();
  }
}

TEST(ReferencePrefill, ChunkedPrefillEqualsTheMatchingRowsOfAFullPrefill) {
  const std::int64_t len = 777, chunk = 265;  // the chunk starts at row 512, a tile multiple
  Batch full = make_batch({len}, {len}, 2, 1, 32, true, 31);
  Batch part = make_batch({chunk}, {len}, 2, 1, 32, true, 31);
  for (Threshold th : {Threshold::dense(), Threshold::flat(1e-3)}) {
    const ReferenceOptions o = options(th, 64, 64, KvOrder::kReverse);
    const auto a = run(full.problem, o);
    const auto c = run(part.problem, o);
    const std::size_t row = 2 * 32;
    EXPECT_TRUE(std::equal(c.begin(), c.end(), a.end() - static_cast<std::ptrdiff_t>(chunk * row)));
  }
  // A chunk that does not start on a query-tile boundary groups rows differently: the dense
  // result is still the same, row for row.
  Batch odd = make_batch({300}, {len}, 2, 1, 32, true, 31);
  const auto a = run(full.problem, options(Threshold::dense(), 64, 64));
  const auto c = run(odd.problem, options(Threshold::dense(), 64, 64));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.end() - static_cast<std::ptrdiff_t>(300 * 64)));
}

TEST(ReferencePrefill, TileCountsFollowTheCausalShape) {
  Batch b = make_batch({300}, {500}, 1, 1, 16, true, 41);
  AttentionStats s;
  run(b.problem, options(Threshold::dense(), 128, 64), &s);
  // Query tiles end at rows 128, 256, 300: they see keys up to 328, 456, 500.
  EXPECT_EQ(s.tiles_total, 6 + 8 + 8);
  Batch nc = make_batch({300}, {500}, 1, 1, 16, false, 41);
  run(nc.problem, options(Threshold::dense(), 128, 64), &s);
  EXPECT_EQ(s.tiles_total, 3 * 8);
}

TEST(ReferencePrefill, ThreadCountDoesNotChangeAnyBit) {
  Batch b = make_batch({600, 200}, {600, 300}, 4, 2, 32, true, 43);
  ReferenceOptions o = options(Threshold::flat(1e-3), 64, 64);
  o.num_threads = 1;
  AttentionStats s1, s4;
  const auto one = run(b.problem, o, &s1);
  o.num_threads = 4;
  EXPECT_TRUE(bit_equal(one, run(b.problem, o, &s4)));
  EXPECT_EQ(s1.tiles_skipped, s4.tiles_skipped);
  EXPECT_EQ(s1.mass_share, s4.mass_share);
}

TEST(ReferencePrefill, NaNStaysInTheAffectedRows) {
  Batch b = make_batch({200}, {200}, 2, 1, 16, true, 47);
  b.q[(150 * 2 + 1) * 16 + 3] = std::numeric_limits<float>::quiet_NaN();  // token 150, head 1
  AttentionStats s;
  const auto out = run(b.problem, options(Threshold::flat(1e-3), 64, 64), &s);
  for (std::int64_t t = 0; t < 200; ++t) {
    for (int h = 0; h < 2; ++h) {
      const bool poisoned = std::isnan(out[(t * 2 + h) * 16]);
      EXPECT_EQ(poisoned, t == 150 && h == 1) << "token " << t << " head " << h;
    }
  }
  EXPECT_EQ(s.nan_rows, 1);
  EXPECT_EQ(s.sequences[0].nan_rows, 1);

  // A NaN key poisons exactly the rows that can see it.
  Batch kb = make_batch({200}, {200}, 2, 1, 16, true, 47);
  kb.k[120 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();
  run(kb.problem, options(Threshold::dense(), 64, 64), &s);
  EXPECT_EQ(s.nan_rows, 2 * 80);  // tokens 120..199, both heads
}

TEST(ReferencePrefill, VisitOrdersAgreeDenseAndSinkFirstSkipsMore) {
  Batch b = make_batch({2048}, {2048}, 2, 1, 64, true, 53);
  const auto fwd = run(b.problem, options(Threshold::dense(), 128, 128, KvOrder::kForward));
  for (KvOrder order : {KvOrder::kReverse, KvOrder::kSinkThenReverse}) {
    EXPECT_LT(rel_l2(run(b.problem, options(Threshold::dense(), 128, 128, order)), fwd), 1e-14);
  }
  AttentionStats forward, sink_first;
  run(b.problem, options(Threshold::flat(1e-3), 128, 128, KvOrder::kForward), &forward);
  run(b.problem, options(Threshold::flat(1e-3), 128, 128, KvOrder::kSinkThenReverse), &sink_first);
  EXPECT_GE(sink_first.tiles_skipped, forward.tiles_skipped);
}

TEST(ReferencePrefill, LseIsTheNaiveLogSumExp) {
  Batch b = make_batch({1, 130, 300}, {1, 400, 300}, 4, 2, 32, true, 41);
  b.problem.window = 0;
  std::vector<double> naive;
  naive_attention(b.problem, &naive);
  ReferenceOptions o = options(Threshold::dense(), 64, 64);
  std::vector<double> lse(naive.size(), kNaN);
  o.lse = lse.data();
  run(b.problem, o);
  for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], naive[i], 1e-12) << i;
}

// Two disjoint key sets attended apart and merged by their log-sum-exps give the whole: the use
// of lse (split-KV, cascades, context parallelism). With skipping, lse is the log of the kept
// keys' sum, so that the merge reproduces the skip output of the whole.
TEST(ReferencePrefill, OutputsMergeExactlyByTheirLse) {
  const int hq = 4, hkv = 2, dim = 32;
  Batch whole = make_batch({50}, {600}, hq, hkv, dim, false, 43);
  const std::size_t row = std::size_t(hkv) * dim;
  Batch first = whole, second = whole;
  first.problem.cu_seqlens_k = {0, 256};
  second.k.erase(second.k.begin(), second.k.begin() + 256 * row);
  second.v.erase(second.v.begin(), second.v.begin() + 256 * row);
  second.problem.k = second.k.data();
  second.problem.v = second.v.data();
  second.problem.cu_seqlens_k = {0, 344};
  const std::size_t rows = 50 * hq;
  std::vector<double> lse_whole(rows), lse_first(rows), lse_second(rows);
  ReferenceOptions o = options(Threshold::dense(), 64, 64);
  o.lse = lse_whole.data();
  const auto out_whole = run(whole.problem, o);
  o.lse = lse_first.data();
  const auto out_first = run(first.problem, o);
  o.lse = lse_second.data();
  const auto out_second = run(second.problem, o);
  for (std::size_t r = 0; r < rows; ++r) {
    const double m = std::max(lse_first[r], lse_second[r]);
    const double w1 = std::exp(lse_first[r] - m), w2 = std::exp(lse_second[r] - m);
    EXPECT_NEAR(m + std::log(w1 + w2), lse_whole[r], 1e-12);
    for (int d = 0; d < dim; ++d) {
      const double merged =
          (w1 * out_first[r * dim + d] + w2 * out_second[r * dim + d]) / (w1 + w2);
      EXPECT_NEAR(merged, out_whole[r * dim + d], 1e-12);
    }
  }
}

// Per-sequence lambdas give each sequence what a flat lambda gives it alone, bit for bit; 0, NaN
// and values from 1 up run it dense.
TEST(ReferencePrefill, PerSequenceLambdasActAsFlatLambdasPerSequence) {
  const std::vector<std::int64_t> lens = {900, 700, 500, 400, 300};
  const std::vector<float> lambdas = {1e-2f, 1e-3f, 0.f, std::nanf(""), 1.f};
  Batch batch = make_batch(lens, lens, 4, 2, 32, true, 47);
  ReferenceOptions o = options(Threshold::dense(), 64, 64, KvOrder::kSinkThenReverse);
  o.lambdas = lambdas;
  AttentionStats st;
  const auto out = run(batch.problem, o, &st);
  EXPECT_GT(st.sequences[0].tiles_skipped, 0);
  std::size_t at = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    Batch one = make_batch({lens[i]}, {lens[i]}, 4, 2, 32, true, 47 + i);
    const float x = lambdas[i];
    const bool skips = x > 0.f && x < 1.f;
    AttentionStats alone;
    const auto expected = run(
        one.problem,
        options(skips ? Threshold::flat(x) : Threshold::dense(), 64, 64, KvOrder::kSinkThenReverse),
        &alone);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), out.begin() + at)) << i;
    EXPECT_EQ(st.sequences[i].tiles_skipped, alone.sequences[0].tiles_skipped) << i;
    EXPECT_EQ(st.sequences[i].lambda, skips ? double(x) : 0.0) << i;
    at += expected.size();
  }
  o.lambdas.pop_back();
  EXPECT_THROW(run(batch.problem, o), std::invalid_argument);  // 4 values, 5 sequences
  o.lambdas = lambdas;
  o.threshold = Threshold::flat(1e-3);
  EXPECT_THROW(run(batch.problem, o), std::invalid_argument);  // both
}

TEST(ReferencePrefill, RejectsBadProblems) {
  Batch b = make_batch({10}, {10}, 4, 2, 16, true, 59);
  std::vector<double> out(out_size(b.problem));
  PrefillProblem p = b.problem;
  p.num_heads_kv = 3;
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);
  p = b.problem;
  p.cu_seqlens_k = {0, 5};
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);  // causal with kv_len < q_len
  p = b.problem;
  p.cu_seqlens_q = {1, 10};
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);
  p = b.problem;
  p.cu_seqlens_q = {0, 10, 10};
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);  // batch sizes differ
  EXPECT_THROW(reference_prefill(b.problem, options(Threshold::dense(), 0, 64), out.data()),
               std::invalid_argument);
  p = b.problem;
  p.window = -1;
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);
  p = b.problem;
  p.causal = false;
  p.window = 16;
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);  // a window needs causal
  p = b.problem;
  p.softmax_scale = -1.0;
  EXPECT_THROW(reference_prefill(p, options(Threshold::dense()), out.data()),
               std::invalid_argument);
}

// ---- decode -------------------------------------------------------------------------------

struct PagedBatch {
  std::vector<float> q, k_pages, v_pages;
  DecodeProblem problem;
  Batch contiguous;  // the same cache, contiguous, with q as a causal q_len-row chunk per sequence
};

// Scatters each sequence's KV over shuffled pages; unused slots hold NaN so a read beyond a
// sequence poisons the output.
PagedBatch make_paged(const std::vector<std::int64_t>& lens, int hq, int hkv, int dim,
                      int page_size, std::uint64_t seed, int q_len = 1) {
  PagedBatch pb;
  pb.contiguous = make_batch(std::vector<std::int64_t>(lens.size(), q_len), lens, hq, hkv, dim,
                             q_len > 1, seed);
  const PrefillProblem& c = pb.contiguous.problem;
  int max_pages = 0;
  std::int64_t total_pages = 0;
  for (std::int64_t l : lens) {
    const int pages = static_cast<int>((l + page_size - 1) / page_size);
    max_pages = std::max(max_pages, pages);
    total_pages += pages;
  }
  max_pages += 1;  // a spare column that must never be read
  const std::size_t row = static_cast<std::size_t>(hkv) * dim;
  pb.k_pages.assign(total_pages * page_size * row, std::numeric_limits<float>::quiet_NaN());
  pb.v_pages = pb.k_pages;
  std::vector<std::int32_t> order(total_pages);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());  // pages out of order
  std::vector<std::int32_t> table(lens.size() * max_pages, -1);
  std::size_t next = 0;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    for (std::int64_t t = 0; t < lens[b]; ++t) {
      if (t % page_size == 0) table[b * max_pages + t / page_size] = order[next++];
      const std::int64_t slot =
          std::int64_t(table[b * max_pages + t / page_size]) * page_size + t % page_size;
      std::copy_n(c.k + (c.cu_seqlens_k[b] + t) * row, row, pb.k_pages.begin() + slot * row);
      std::copy_n(c.v + (c.cu_seqlens_k[b] + t) * row, row, pb.v_pages.begin() + slot * row);
    }
  }
  pb.q = pb.contiguous.q;
  DecodeProblem& d = pb.problem;
  d.q = pb.q.data();
  d.kv = {pb.k_pages.data(), pb.v_pages.data(), total_pages, page_size, table, max_pages, lens};
  d.q_len = q_len;
  d.num_heads_q = hq;
  d.num_heads_kv = hkv;
  d.head_dim = dim;
  return pb;
}

std::vector<double> run_decode(const DecodeProblem& p, const ReferenceOptions& o,
                               AttentionStats* stats = nullptr) {
  std::vector<double> out(p.kv.seq_lens.size() * p.q_len * p.num_heads_q * p.head_dim, kNaN);
  AttentionStats s = reference_decode(p, o, out.data());
  if (stats) *stats = std::move(s);
  return out;
}

TEST(ReferenceDecode, DenseMatchesNaiveOverPagesWithPoisonedSlots) {
  PagedBatch pb = make_paged({1, 17, 300, 129}, 8, 2, 32, 16, 61);
  const auto naive = naive_attention(pb.contiguous.problem);
  for (int splits : {1, 3}) {
    ReferenceOptions o = options(Threshold::dense(), 1, 64);
    o.num_splits = splits;
    EXPECT_LT(rel_l2(run_decode(pb.problem, o), naive), 1e-13) << splits << " splits";
  }
}

TEST(ReferenceDecode, OneSplitDenseIsBitIdenticalToAOneRowPrefill) {
  PagedBatch pb = make_paged({77, 513}, 4, 1, 32, 32, 67);
  const ReferenceOptions o = options(Threshold::dense(), 1, 64);
  EXPECT_TRUE(bit_equal(run_decode(pb.problem, o), run(pb.contiguous.problem, o)));
}

TEST(ReferenceDecode, WindowedDecodeIsBitIdenticalToAWindowedOneRowPrefill) {
  PagedBatch pb = make_paged({77, 513, 1000}, 4, 1, 32, 32, 83);
  for (std::int64_t window : {1, 50, 64, 600}) {
    const ReferenceOptions o = options(Threshold::dense(), 1, 64);
    DecodeProblem d = pb.problem;
    d.window = window;
    PrefillProblem p = pb.contiguous.problem;
    p.causal = true;
    p.window = window;
    EXPECT_TRUE(bit_equal(run_decode(d, o), run(p, o))) << "window " << window;
    for (int splits : {2, 5}) {  // splits cut the windowed range: the same result up to rounding
      ReferenceOptions os = o;
      os.num_splits = splits;
      EXPECT_LT(rel_l2(run_decode(d, os), run(p, o)), 1e-13) << window << ", " << splits;
    }
  }
  DecodeProblem d = pb.problem;
  d.window = 100;
  std::vector<double> out(3 * 4 * 32);
  EXPECT_THROW(reference_decode(d, options(Threshold::flat(1e-3)), out.data()),
               std::invalid_argument);
}

TEST(ReferenceDecode, VoteCoversTheWholeGroupAndHoldsTheBound) {
  PagedBatch pb = make_paged({2000, 900}, 8, 2, 64, 64, 71);
  for (int splits : {1, 4}) {
    std::vector<TileRecord> trace;
    ReferenceOptions o = options(Threshold::flat(1e-3), 1, 64, KvOrder::kSinkThenReverse);
    o.num_splits = splits;
    o.trace = &trace;
    AttentionStats s;
    run_decode(pb.problem, o, &s);
    ASSERT_GT(s.tiles_skipped, 0);
    std::int64_t first_of_split_skipped = 0, seeded_first_skipped = 0;
    for (const TileRecord& r : trace) {
      if (r.visit == 0 && r.skipped)
        ++(r.q_tile == 0 ? first_of_split_skipped : seeded_first_skipped);
      if (!r.skipped) continue;
      // Every query head of the group votes: each of its weights must lie below lambda.
      for (int h = r.head * 4; h < r.head * 4 + 4; ++h) {
        const auto sc = naive_scores(pb.contiguous.problem, r.seq, h)[0];
        const double m = *std::max_element(sc.begin(), sc.end());
        for (std::int64_t j = r.kv_tile * 64;
             j < std::min<std::int64_t>((r.kv_tile + 1) * 64, std::ssize(sc)); ++j) {
          EXPECT_LT(std::exp(sc[j] - m), 1e-3);
        }
      }
    }
    EXPECT_EQ(first_of_split_skipped, 0) << "the first split's first tile sets its running max";
    // Later splits start from the sink's maxima: their first tiles can be skipped.
    if (splits > 1) {
      EXPECT_GT(seeded_first_skipped, 0);
    }
    // tiles_total counts (GQA group, KV tile) pairs.
    EXPECT_EQ(s.tiles_total, 2 * ((2000 + 63) / 64 + (900 + 63) / 64));
  }
}

// The splits' combine yields the whole row's log-sum-exp, as one split and the prefill do.
TEST(ReferenceDecode, LseOfTheCombinedSplitsIsTheNaiveOne) {
  PagedBatch pb = make_paged({1, 17, 300, 129}, 8, 2, 32, 16, 79);
  std::vector<double> naive;
  naive_attention(pb.contiguous.problem, &naive);
  for (int splits : {1, 3}) {
    ReferenceOptions o = options(Threshold::dense(), 1, 64);
    o.num_splits = splits;
    std::vector<double> lse(naive.size(), kNaN);
    o.lse = lse.data();
    run_decode(pb.problem, o);
    for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], naive[i], 1e-12) << i;
  }
}

TEST(ReferenceDecode, GuardedLambdaZeroIsBitIdenticalToDense) {
  PagedBatch pb = make_paged({300, 1000}, 4, 2, 32, 16, 73);
  ReferenceOptions dense = options(Threshold::dense(), 1, 32);
  dense.num_splits = 2;
  ReferenceOptions guarded = dense;
  guarded.threshold = Threshold::table(ScaleTable({{2048, 100.0}}));
  EXPECT_TRUE(bit_equal(run_decode(pb.problem, dense), run_decode(pb.problem, guarded)));
}

// Speculative verification: q_len new tokens per sequence are a causal chunk over the cache.
TEST(ReferenceDecode, MultiTokenDenseEqualsACausalChunk) {
  // Lengths 68 and 129: with tiles of 64 the last tile starts past the first tokens' last keys,
  // so those rows see nothing in the last split.
  PagedBatch pb = make_paged({4, 68, 129, 700}, 8, 2, 32, 16, 89, 4);
  const auto naive = naive_attention(pb.contiguous.problem);
  for (int splits : {1, 3, 11}) {
    ReferenceOptions o = options(Threshold::dense(), 1, 64);
    o.num_splits = splits;
    const std::vector<double> out = run_decode(pb.problem, o);
    EXPECT_LT(rel_l2(out, naive), 1e-13) << splits << " splits";
    for (double x : out) ASSERT_FALSE(std::isnan(x)) << splits << " splits";
  }
  for (std::int64_t window : {1, 50, 200}) {
    DecodeProblem d = pb.problem;
    d.window = window;
    PrefillProblem p = pb.contiguous.problem;
    p.window = window;
    ReferenceOptions o = options(Threshold::dense(), 1, 64);
    o.num_splits = 2;
    EXPECT_LT(rel_l2(run_decode(d, o), naive_attention(p)), 1e-13) << "window " << window;
  }
}

TEST(ReferenceDecode, MultiTokenVoteCoversEveryTokenAndHoldsTheBound) {
  const int q_len = 3;
  PagedBatch pb = make_paged({2000, 900}, 8, 2, 64, 64, 97, q_len);
  std::vector<TileRecord> trace;
  ReferenceOptions o = options(Threshold::flat(1e-3), 1, 64);
  o.num_splits = 2;
  o.trace = &trace;
  AttentionStats s;
  run_decode(pb.problem, o, &s);
  ASSERT_GT(s.tiles_skipped, 0);
  EXPECT_EQ(s.sequences[0].q_len, q_len);
  for (const TileRecord& r : trace) {
    if (!r.skipped) continue;
    // Every (token, head) row of the group votes: each weight it sees lies below lambda.
    for (int h = r.head * 4; h < r.head * 4 + 4; ++h) {
      const auto sc = naive_scores(pb.contiguous.problem, r.seq, h);
      for (const std::vector<double>& row : sc) {
        const double m = *std::max_element(row.begin(), row.end());
        for (std::int64_t j = r.kv_tile * 64;
             j < std::min<std::int64_t>((r.kv_tile + 1) * 64, std::ssize(row)); ++j) {
          if (row[j] != -std::numeric_limits<double>::infinity()) {
            EXPECT_LT(std::exp(row[j] - m), 1e-3);
          }
        }
      }
    }
  }
}

TEST(ReferenceDecode, RejectsBadPageTables) {
  PagedBatch pb = make_paged({100}, 2, 1, 16, 16, 79);
  DecodeProblem p = pb.problem;
  p.kv.page_table[0] = static_cast<std::int32_t>(p.kv.num_pages);
  std::vector<double> out(2 * 16);
  EXPECT_THROW(reference_decode(p, options(Threshold::dense()), out.data()), std::invalid_argument);
  p = pb.problem;
  p.kv.seq_lens = {1000};
  EXPECT_THROW(reference_decode(p, options(Threshold::dense()), out.data()), std::invalid_argument);
  p = pb.problem;
  p.kv.seq_lens = {0};
  EXPECT_THROW(reference_decode(p, options(Threshold::dense()), out.data()), std::invalid_argument);
  p = pb.problem;
  p.q_len = 0;
  EXPECT_THROW(reference_decode(p, options(Threshold::dense()), out.data()), std::invalid_argument);
  p = pb.problem;
  p.q_len = 2;
  p.kv.seq_lens = {1};  // the cache must hold both new tokens
  std::vector<double> out2(2 * 2 * 16);
  EXPECT_THROW(reference_decode(p, options(Threshold::dense()), out2.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace skipsoftmax
