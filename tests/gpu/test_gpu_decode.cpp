// The Hopper paged decode kernels against the CPU reference (float64), on the GPU: outputs, skip
// decisions for the same tiles and splits, the guard, ragged lengths, partly filled pages and
// NaN-poisoned unused slots. Skipped cleanly on machines without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "bits16.h"
#include "gpu_harness.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"

namespace skipsoftmax {
namespace {

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

using gpu::nan_bits;
using gpu::rel_l2;
using gpu::tolerance;

bool compiled(DType t, int dim) {
  DecodeArguments probe;
  probe.dtype = t;
  probe.head_dim = dim;
  return can_implement(probe).find("this build has only") == std::string::npos;
}

// One decode step of a ragged batch: the cache holds each sequence's structured K/V on shuffled
// pages, unused slots NaN; the queries are the sequence's last q_len tokens.
struct Case {
  DType dtype;
  int hq, hkv, dim, page_size;
  std::vector<std::int32_t> lens;
  std::vector<std::uint16_t> q, k_pages, v_pages;  // 16-bit bits
  std::vector<float> qf, kf, vf;                   // widened, for the reference
  std::vector<std::int32_t> page_table;
  int max_pages = 0;
  std::int64_t num_pages = 0;
  int q_len = 1;
};

Case make_case(DType t, int hq, int hkv, int dim, int page_size, std::vector<std::int32_t> lens,
               std::uint64_t seed, double noise = 0.75, int q_len = 1) {
  Case c;
  c.dtype = t;
  c.hq = hq;
  c.hkv = hkv;
  c.dim = dim;
  c.page_size = page_size;
  c.lens = std::move(lens);
  c.q_len = q_len;
  const std::size_t row = static_cast<std::size_t>(hkv) * dim;
  std::int64_t needed = 0;
  for (int len : c.lens) {
    const int n = (len + page_size - 1) / page_size;
    needed += n;
    c.max_pages = std::max(c.max_pages, n);
  }
  c.num_pages = needed + 2;
  std::vector<std::int32_t> order(static_cast<std::size_t>(c.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  c.k_pages.assign(static_cast<std::size_t>(c.num_pages) * page_size * row, nan_bits(t));
  c.v_pages = c.k_pages;
  c.page_table.assign(c.lens.size() * c.max_pages, 0);
  std::size_t next = 0;
  for (std::size_t s = 0; s < c.lens.size(); ++s) {
    SyntheticSpec spec;
    spec.tokens = c.lens[s];
    spec.num_heads_q = hq;
    spec.num_heads_kv = hkv;
    spec.head_dim = dim;
    spec.noise = noise;
    spec.seed = seed * 31 + s;
    const SyntheticQkv qkv = make_structured_qkv(spec);
    const std::size_t qrow = static_cast<std::size_t>(hq) * dim;
    for (std::size_t i = 0; i < q_len * qrow; ++i) {
      c.q.push_back(to_bits(qkv.q[(c.lens[s] - q_len) * qrow + i], t));
    }
    for (int tok = 0; tok < c.lens[s]; ++tok) {
      if (tok % page_size == 0) c.page_table[s * c.max_pages + tok / page_size] = order[next++];
      const std::size_t slot =
          static_cast<std::size_t>(c.page_table[s * c.max_pages + tok / page_size]) * page_size +
          tok % page_size;
      for (std::size_t i = 0; i < row; ++i) {
        c.k_pages[slot * row + i] = to_bits(qkv.k[tok * row + i], t);
        c.v_pages[slot * row + i] = to_bits(qkv.v[tok * row + i], t);
      }
    }
  }
  const auto widen = [t](const std::vector<std::uint16_t>& b) {
    std::vector<float> f(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) f[i] = from_bits(b[i], t);
    return f;
  };
  c.qf = widen(c.q);
  c.kf = widen(c.k_pages);
  c.vf = widen(c.v_pages);
  return c;
}

DecodeArguments args_of(const Case& c, const Threshold& th, int splits) {
  DecodeArguments a;
  a.dtype = c.dtype;
  a.head_dim = c.dim;
  a.batch = static_cast<int>(c.lens.size());
  a.max_seq_len = *std::max_element(c.lens.begin(), c.lens.end());
  a.num_heads_q = c.hq;
  a.num_heads_kv = c.hkv;
  a.kv.num_pages = c.num_pages;
  a.kv.page_size = c.page_size;
  a.kv.max_pages_per_seq = c.max_pages;
  a.threshold = th;
  a.num_splits = splits;
  a.q_len = c.q_len;
  return a;
}

struct Result {
  std::vector<double> out;
  std::vector<std::uint16_t> bits;
  std::vector<unsigned long long> stats;
  KernelChoice kernel;
};

Result run_gpu(const Case& c, const Threshold& th, int splits,
               std::optional<KernelChoice> force = std::nullopt, int window = 0) {
  DecodeArguments a = args_of(c, th, splits);
  a.force_kernel = force;
  a.window = window;
  const HostDecodeResult h = run_decode_host(a, c.q, c.k_pages, c.v_pages, c.page_table, c.lens);
  Result r{{}, h.out, h.stats, h.kernel};
  for (std::uint16_t b : h.out) r.out.push_back(from_bits(b, c.dtype));
  return r;
}

AttentionStats run_cpu(const Case& c, const Threshold& th, int splits, std::vector<double>& out,
                       int window = 0, const std::vector<float>& lambdas = {},
                       std::vector<double>* lse = nullptr) {
  DecodeProblem p;
  p.window = window;
  p.q = c.qf.data();
  p.q_len = c.q_len;
  p.kv.k_pages = c.kf.data();
  p.kv.v_pages = c.vf.data();
  p.kv.num_pages = c.num_pages;
  p.kv.page_size = c.page_size;
  p.kv.page_table = c.page_table;
  p.kv.max_pages_per_seq = c.max_pages;
  p.kv.seq_lens.assign(c.lens.begin(), c.lens.end());
  p.num_heads_q = c.hq;
  p.num_heads_kv = c.hkv;
  p.head_dim = c.dim;
  ReferenceOptions o;
  o.threshold = th;
  o.tiles.tile_k = decode_tile_k(c.dim);
  o.tiles.order = KvOrder::kForward;
  o.num_splits = splits;
  o.lambdas = lambdas;
  if (lse) {
    lse->assign(c.q.size() / c.dim, 0.0);
    o.lse = lse->data();
  }
  out.assign(c.q.size(), 0.0);
  return reference_decode(p, o, out.data());
}

std::int64_t g_disagreements = 0, g_tiles = 0;

void expect_stats_agree(const Result& r, const AttentionStats& ref, const std::string& what) {
  gpu::expect_stats_agree(r.stats, ref, what, g_disagreements, g_tiles);
}

struct Heads {
  int q, kv;
};
constexpr Heads kHeads[] = {{8, 2}, {9, 3}, {16, 1}, {2, 2}};

TEST(GpuDecode, DenseMatchesReferenceOnRaggedPagedBatches) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      for (const Heads h : kHeads) {
        for (int page : {16, 64, 128}) {
          const Case c = make_case(t, h.q, h.kv, dim, page, {1, 63, 64, 65, 700, 3001}, 7 + page);
          for (int splits : {1, 3, 8}) {
            const std::string what = std::string(to_string(t)) + " d" + std::to_string(dim) +
                                     " Hq=" + std::to_string(h.q) + " Hkv=" + std::to_string(h.kv) +
                                     " page " + std::to_string(page) + " splits " +
                                     std::to_string(splits);
            const Result r = run_gpu(c, Threshold::dense(), splits);
            EXPECT_EQ(r.kernel, KernelChoice::kDense);
            for (double x : r.out) ASSERT_FALSE(std::isnan(x)) << what << ": NaN in the output";
            std::vector<double> ref;
            run_cpu(c, Threshold::dense(), splits, ref);
            EXPECT_LT(rel_l2(r.out, ref), tolerance(t)) << what;
          }
        }
      }
    }
  }
}

// One lambda per sequence (run_decode_host uploads the host copy) and each row's log-sum-exp,
// with one split and with the combine: the reference's output, decisions and lse for the same
// lambdas, and the dense kernel's lse. Sequences at 0 and NaN run dense.
TEST(GpuDecode, PerSequenceLambdasAndLseMatchReference) {
  REQUIRE_HOPPER();
  const std::vector<float> lambdas = {0.f, 1e-3f, 1e-2f, std::nanf(""), 3e-3f};
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      for (const Heads h : {Heads{8, 2}, Heads{16, 1}}) {
        for (int q_len : {1, 2}) {
          const Case c = make_case(t, h.q, h.kv, dim, 32, {700, 2000, 5000, 9000, 3001}, 13, 0.75,
                                   h.q / h.kv * q_len <= 16 ? q_len : 1);
          for (int splits : {1, 4}) {
            for (bool per_sequence : {false, true}) {
              const std::string what =
                  std::string(to_string(t)) + " d" + std::to_string(dim) +
                  " Hq=" + std::to_string(h.q) + " q_len " + std::to_string(c.q_len) + " splits " +
                  std::to_string(splits) + (per_sequence ? " lambdas" : " dense");
              DecodeArguments a = args_of(c, Threshold::dense(), splits);
              a.lambdas = per_sequence ? lambdas.data() : nullptr;
              std::vector<float> want_lse(1);
              a.lse = want_lse.data();
              const HostDecodeResult g =
                  run_decode_host(a, c.q, c.k_pages, c.v_pages, c.page_table, c.lens);
              EXPECT_EQ(g.kernel, per_sequence ? KernelChoice::kSkip : KernelChoice::kDense);
              std::vector<double> ref, ref_lse;
              const AttentionStats st =
                  run_cpu(c, Threshold::dense(), splits, ref, 0,
                          per_sequence ? lambdas : std::vector<float>{}, &ref_lse);
              Result r{{}, g.out, g.stats, g.kernel};
              for (std::uint16_t b : g.out) r.out.push_back(from_bits(b, t));
              EXPECT_LT(rel_l2(r.out, ref), tolerance(t)) << what;
              std::vector<bool> dense_rows(ref_lse.size(), !per_sequence);
              if (per_sequence) {
                expect_stats_agree(r, st, what);
                const std::size_t seq_rows = ref_lse.size() / c.lens.size();
                for (std::size_t i : {0, 3}) {
                  EXPECT_EQ(st.sequences[i].tiles_skipped, 0) << what;
                  std::fill_n(dense_rows.begin() + i * seq_rows, seq_rows, true);
                }
              }
              gpu::expect_lse_close(g.lse, ref_lse, dense_rows, what);
            }
          }
        }
      }
    }
  }
}

TEST(GpuDecode, SkipMatchesReferenceOutputAndDecisions) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      for (const Heads h : kHeads) {
        const Case c = make_case(t, h.q, h.kv, dim, 32, {100, 2000, 5000, 9000}, 11);
        for (double lambda : {1e-4, 1e-3, 1e-2}) {
          for (int splits : {1, 4}) {
            const std::string what = std::string(to_string(t)) + " d" + std::to_string(dim) +
                                     " Hq=" + std::to_string(h.q) + " Hkv=" + std::to_string(h.kv) +
                                     " lambda " + std::to_string(lambda) + " splits " +
                                     std::to_string(splits);
            const Threshold th = Threshold::flat(lambda);
            const Result r = run_gpu(c, th, splits);
            EXPECT_EQ(r.kernel, KernelChoice::kSkip);
            std::vector<double> ref;
            const AttentionStats st = run_cpu(c, th, splits, ref);
            EXPECT_LT(rel_l2(r.out, ref), tolerance(t)) << what;
            expect_stats_agree(r, st, what);
          }
        }
      }
    }
  }
  std::printf("decode skip decisions: %lld of %lld visited tiles differ from the CPU reference\n",
              static_cast<long long>(g_disagreements), static_cast<long long>(g_tiles));
  EXPECT_GT(g_tiles, 0);
}

TEST(GpuDecode, SkipKernelAtLambdaZeroIsBitIdenticalToDense) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      const Case c = make_case(t, 8, 2, dim, 64, {77, 4000}, 3);
      for (int splits : {1, 5}) {
        const Result dense = run_gpu(c, Threshold::dense(), splits);
        const Result skip = run_gpu(c, Threshold::dense(), splits, KernelChoice::kSkip);
        EXPECT_EQ(skip.kernel, KernelChoice::kSkip);
        EXPECT_TRUE(dense.bits == skip.bits) << to_string(t) << " d" << dim;
        EXPECT_EQ(skip.stats[1] + skip.stats[3], 0u);
      }
    }
  }
}

TEST(GpuDecode, PerLengthTableAndDispatch) {
  REQUIRE_HOPPER();
  const Case c = make_case(DType::kBF16, 8, 2, 128, 64, {300, 2500, 6000}, 5);
  const Threshold th = Threshold::table(ScaleTable({{1024, 2.0}, {4096, 8.0}}));
  const Result r = run_gpu(c, th, 2);
  EXPECT_EQ(r.kernel, KernelChoice::kSkip);
  std::vector<double> ref;
  const AttentionStats st = run_cpu(c, th, 2, ref);
  EXPECT_EQ(r.stats[1], 0u);  // 300 lies below the first bin: the guard
  EXPECT_GT(st.sequences[2].tiles_skipped, 0);
  EXPECT_LT(rel_l2(r.out, ref), tolerance(DType::kBF16));
  expect_stats_agree(r, st, "table");
  const Case short_batch = make_case(DType::kBF16, 8, 2, 128, 64, {300, 900}, 5);
  EXPECT_EQ(run_gpu(short_batch, th, 1).kernel, KernelChoice::kDense);
  // A batch of one is dispatched by its own lambda: 6000 in a row with S >= L runs the dense
  // kernel, with the bits of the skip kernel's guard.
  const Threshold guarded_row = Threshold::table(ScaleTable({{1024, 2.0}, {4096, 8000.0}}));
  const Case one = make_case(DType::kBF16, 8, 2, 128, 64, {6000}, 5);
  const Result dense = run_gpu(one, guarded_row, 2);
  EXPECT_EQ(dense.kernel, KernelChoice::kDense);
  const Result guard = run_gpu(one, guarded_row, 2, KernelChoice::kSkip);
  EXPECT_TRUE(dense.bits == guard.bits);
  EXPECT_EQ(guard.stats[1], 0u);
  const Case skippable = make_case(DType::kBF16, 8, 2, 128, 64, {2500}, 5);
  EXPECT_EQ(run_gpu(skippable, guarded_row, 2).kernel, KernelChoice::kSkip);
}

// run_decode_host checks the arguments and its host tensors before it looks for a GPU (pure
// host logic): the kernels would read past a page-table row, or a page past the cache.
TEST(GpuDecode, HostWrapperChecksItsTensorsFirst) {
  const Case c = make_case(DType::kBF16, 8, 2, 128, 64, {100, 300}, 3);
  const auto message = [](const DecodeArguments& a, const Case& k) -> std::string {
    try {
      run_decode_host(a, k.q, k.k_pages, k.v_pages, k.page_table, k.lens);
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::runtime_error&) {
      return "";  // the GPU check, or the GPU itself: the arguments passed
    }
    return "";
  };
  const DecodeArguments a = args_of(c, Threshold::dense(), 1);
  EXPECT_EQ(message(a, c), "");
  DecodeArguments longer = a;
  longer.max_seq_len = 320;
  EXPECT_NE(message(longer, c).find("max_seq_len (320) is not the longest seq_lens entry (300)"),
            std::string::npos);
  Case past = c;
  past.lens[0] = 301;
  EXPECT_NE(message(a, past).find("seq_lens[0] = 301 lies outside [q_len, max_seq_len]"),
            std::string::npos);
  Case outside = c;
  outside.page_table[1] = static_cast<std::int32_t>(c.num_pages);
  EXPECT_NE(message(a, outside).find("page_table[0][1] = "), std::string::npos);
  Case short_q = c;
  short_q.q.pop_back();
  EXPECT_NE(message(a, short_q).find("q holds"), std::string::npos);
}

TEST(GpuDecode, AutomaticSplitsOnALongContext) {
  REQUIRE_HOPPER();
  const Case c = make_case(DType::kBF16, 32, 8, 128, 64, {40000}, 9);
  DecodeArguments a = args_of(c, Threshold::flat(1e-3), 0);
  const int splits = decode_num_splits(a);
  EXPECT_GT(splits, 1);
  const Result r = run_gpu(c, Threshold::flat(1e-3), 0);
  std::vector<double> ref;
  const AttentionStats st = run_cpu(c, Threshold::flat(1e-3), splits, ref);
  EXPECT_LT(rel_l2(r.out, ref), tolerance(DType::kBF16));
  expect_stats_agree(r, st, "auto splits");
}

// Pure host logic: runs without a GPU too, where decode_num_splits assumes an H100/H200's 132
// multiprocessors. One wave of two CTAs a multiprocessor, down to 8 tiles a split; a skip launch
// splits finer than a dense one, so that CTAs of different sparsity even out across the
// multiprocessors, but keeps 64 tiles a split.
TEST(GpuDecode, SkipLaunchesSplitFinerThanDenseOnes) {
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  cudaGetLastError();
  if (sms != 132) GTEST_SKIP() << "the expected counts are for 132 multiprocessors";
  const auto splits = [](int batch, int len, const Threshold& th, int head_dim = 128,
                         int heads_kv = 8) {
    DecodeArguments a;
    a.head_dim = head_dim;
    a.num_heads_q = 4 * heads_kv;
    a.num_heads_kv = heads_kv;
    a.batch = batch;
    a.max_seq_len = len;
    a.threshold = th;
    return decode_num_splits(a);
  };
  const Threshold dense = Threshold::dense(), skip = Threshold::flat(1e-3);
  EXPECT_EQ(splits(64, 32768, dense), 1);
  EXPECT_EQ(splits(64, 32768, skip), 2);  // 4 waves of 264 CTAs
  EXPECT_EQ(splits(8, 32768, dense), 4);
  EXPECT_EQ(splits(8, 32768, skip), 8);    // 64 tiles a split
  EXPECT_EQ(splits(4, 32768, dense), 8);   // two CTAs per SM: 64 tiles a split
  EXPECT_EQ(splits(2, 32768, dense), 16);  // 32 tiles a split
  EXPECT_EQ(splits(2, 32768, skip), 16);
  EXPECT_EQ(splits(1, 32768, dense), 32);  // 33 would leave the last split empty
  EXPECT_EQ(splits(1, 32768, skip), 32);
  EXPECT_EQ(splits(1, 131072, dense), 33);  // 63 tiles a split (the last 32)
  EXPECT_EQ(splits(1, 131072, skip), 33);
  EXPECT_EQ(splits(1, 65536, skip), 32);
  EXPECT_EQ(splits(1, 16384, dense), 32);  // 8 tiles a split
  EXPECT_EQ(splits(1, 8192, dense), 16);   // 4 tiles at two a SM: one CTA per SM
  EXPECT_EQ(splits(1, 8192, skip), 16);
  EXPECT_EQ(splits(1, 4096, dense), 16);  // 4 tiles a split
  EXPECT_EQ(splits(1, 4096, skip), 16);
  EXPECT_EQ(splits(1, 32768, dense, 256), 16);  // one CTA per SM holds a head dim 256 tile
  EXPECT_EQ(splits(48, 32768, dense), 2);       // 384 CTAs: 1.45 waves; 2 splits fill 97% of 3
  // Head dim 64: three CTAs per SM. 512 CTAs on 396 slots fill 65% of 2 waves, 1,536 97% of 4.
  EXPECT_EQ(splits(64, 32768, dense, 64), 3);
  EXPECT_EQ(splits(64, 32768, skip, 64), 3);
  EXPECT_EQ(splits(8, 32768, dense, 64), 4);  // one wave at two a multiprocessor
  EXPECT_EQ(splits(8, 32768, skip, 64), 6);   // 8 would fill 65% of 2 waves, 6 97% of one
  EXPECT_EQ(splits(64, 4096, skip), 1);
  // 90 (sequence, KV head) pairs (30 sequences of SmolLM2's 3 KV heads): two CTAs a multiprocessor
  // rounded down give 2 splits, 180 CTAs; at head dim 64 three fit, and 3 splits fill them better.
  EXPECT_EQ(splits(30, 8192, dense, 64, 3), 3);
  EXPECT_EQ(splits(30, 8192, skip, 64, 3), 4);  // skip launches fill all three: 360 CTAs
  EXPECT_EQ(splits(1, 32768, skip, 64), 47);    // 11 tiles a split, against dense's 32 of 16
  EXPECT_EQ(splits(2, 32768, skip, 64), 24);
  EXPECT_EQ(splits(1, 8192, skip, 64), 16);  // three a multiprocessor would leave 4 tiles a split
  EXPECT_EQ(splits(30, 8192, dense, 128, 3), 2);   // two a multiprocessor at most: one wave
  EXPECT_EQ(splits(16, 32768, dense, 64, 1), 16);  // 256 CTAs fill the wave of two a multiprocessor
  DecodeArguments forced;
  forced.batch = 64;
  forced.max_seq_len = 32768;
  forced.num_heads_q = 32;
  forced.num_heads_kv = 8;
  forced.force_kernel = KernelChoice::kSkip;  // the guard runs the skip kernel too
  EXPECT_EQ(decode_num_splits(forced), 2);
  forced.num_splits = 3;
  EXPECT_EQ(decode_num_splits(forced), 3);
}

// Speculative verification: q_len new tokens a sequence, causal among themselves, their rows
// voting with the group's. Lengths put a split's first tiles past the first tokens' keys.
TEST(GpuDecode, MultiTokenGroupsMatchReferenceOutputAndDecisions) {
  REQUIRE_HOPPER();
  struct Shape {
    int hq, hkv, q_len;
  };
  const std::int64_t disagreements_before = g_disagreements, tiles_before = g_tiles;
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      for (const Shape sh : {Shape{8, 2, 4}, Shape{6, 3, 8}, Shape{2, 2, 16}, Shape{9, 3, 5}}) {
        const Case c = make_case(t, sh.hq, sh.hkv, dim, 16, {16, 65, 130, 700, 3001}, 31 + dim,
                                 0.75, sh.q_len);
        for (int splits : {1, 3, 8}) {
          const std::string what = std::string(to_string(t)) + " d" + std::to_string(dim) +
                                   " Hq=" + std::to_string(sh.hq) +
                                   " Hkv=" + std::to_string(sh.hkv) + " q_len " +
                                   std::to_string(sh.q_len) + " splits " + std::to_string(splits);
          const Result dense = run_gpu(c, Threshold::dense(), splits);
          for (double x : dense.out) ASSERT_FALSE(std::isnan(x)) << what << ": NaN in the output";
          std::vector<double> ref;
          run_cpu(c, Threshold::dense(), splits, ref);
          EXPECT_LT(rel_l2(dense.out, ref), tolerance(t)) << what;
          const Result guard = run_gpu(c, Threshold::dense(), splits, KernelChoice::kSkip);
          EXPECT_EQ(guard.bits, dense.bits) << what << ": the guard is not bit-identical";
          for (double lambda : {1e-3, 1e-2}) {
            const Result r = run_gpu(c, Threshold::flat(lambda), splits);
            const AttentionStats st = run_cpu(c, Threshold::flat(lambda), splits, ref);
            EXPECT_LT(rel_l2(r.out, ref), tolerance(t)) << what << " lambda " << lambda;
            expect_stats_agree(r, st, what);
          }
        }
        for (int window : {1, 100}) {
          const Result r = run_gpu(c, Threshold::dense(), 2, std::nullopt, window);
          std::vector<double> ref;
          run_cpu(c, Threshold::dense(), 2, ref, window);
          EXPECT_LT(rel_l2(r.out, ref), tolerance(t))
              << "window " << window << " q_len " << sh.q_len;
        }
      }
    }
  }
  std::printf(
      "multi-token decode skip decisions: %lld of %lld visited tiles differ from the CPU "
      "reference\n",
      static_cast<long long>(g_disagreements - disagreements_before),
      static_cast<long long>(g_tiles - tiles_before));
  // More rows than one MMA holds: refused with the reason.
  const Case c = make_case(DType::kBF16, 8, 2, 128, 16, {100}, 3, 0.75, 5);
  DecodeArguments a = args_of(c, Threshold::dense(), 1);
  EXPECT_NE(can_implement(a).find("q_len x (Hq / Hkv) must lie in [1, 16]"), std::string::npos);
}

TEST(GpuDecode, SlidingWindowMatchesReference) {
  REQUIRE_HOPPER();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int dim : {64, 128, 256}) {
      if (!compiled(t, dim)) continue;
      const Case c = make_case(t, 4, 1, dim, 64, {1, 63, 700, 3001}, 29);
      for (int window : {1, 64, 100, 512, 5000}) {
        for (int splits : {1, 3}) {
          const Result r = run_gpu(c, Threshold::dense(), splits, std::nullopt, window);
          for (double x : r.out) ASSERT_FALSE(std::isnan(x)) << "window " << window;
          std::vector<double> ref;
          run_cpu(c, Threshold::dense(), splits, ref, window);
          EXPECT_LT(rel_l2(r.out, ref), tolerance(t))
              << to_string(t) << " d" << dim << " window " << window << " splits " << splits;
        }
      }
    }
  }
}

TEST(GpuDecode, CanImplementNamesTheProblem) {
  DecodeArguments a;
  a.head_dim = 80;
  EXPECT_NE(can_implement(a).find("head_dim 80"), std::string::npos);
  a.head_dim = 128;
  a.num_heads_q = 64;
  a.num_heads_kv = 2;
  EXPECT_NE(can_implement(a).find("GQA groups"), std::string::npos);
  alignas(16) static int dummy[4];
  a.num_heads_kv = 8;
  a.q = a.out = dummy;
  a.seq_lens = dummy;
  a.kv = {dummy, dummy, 1, 64, dummy, 1};
  a.batch = a.max_seq_len = 1;
  EXPECT_EQ(can_implement(a), "");
  a.window = 512;
  a.threshold = Threshold::flat(1e-3);
  EXPECT_NE(can_implement(a).find("sliding-window decode"), std::string::npos) << can_implement(a);
  EXPECT_THROW(run_decode(a, nullptr, 0, nullptr), std::invalid_argument);
  // The combine kernel reads the split outputs as float4.
  a.window = 0;
  a.threshold = Threshold::dense();
  a.num_splits = 2;
  alignas(16) static unsigned char workspace[64];
  try {
    run_decode(a, workspace + 4, sizeof workspace - 4, nullptr);
    ADD_FAILURE() << "a misaligned workspace was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
  // The launch checks the workspace's size against its split count's need before any device
  // work (so this runs without a GPU): 2 splits of 64 query rows of 129 floats.
  ASSERT_EQ(decode_workspace_size(a), 2u * 64 * 129 * 4);
  try {
    run_decode(a, workspace, sizeof workspace, nullptr);
    ADD_FAILURE() << "a workspace too small was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2 splits need 66048 bytes of workspace"),
              std::string::npos)
        << e.what();
  }
  DecodeArguments bad = a;
  bad.head_dim = 80;
  EXPECT_THROW(decode_workspace_size(bad), std::invalid_argument);
  bad = a;
  bad.batch = 70000;
  bad.kv.max_pages_per_seq = 1;
  EXPECT_NE(can_implement(bad).find("must be at most 65535"), std::string::npos)
      << can_implement(bad);
  bad = a;
  bad.num_heads_q = bad.num_heads_kv = 70000;
  EXPECT_NE(can_implement(bad).find("must be at most 65535"), std::string::npos)
      << can_implement(bad);
  bad = a;
  bad.softmax_scale = 1e-50;
  EXPECT_NE(can_implement(bad).find("got 1e-50"), std::string::npos) << can_implement(bad);
  bad = a;
  bad.softmax_scale = 1e39;
  EXPECT_NE(can_implement(bad).find("finite float"), std::string::npos) << can_implement(bad);
  bad = a;
  bad.kv.num_pages = std::int64_t{1} << 60;
  EXPECT_NE(can_implement(bad).find("num_pages * page_size"), std::string::npos);
  // A window of INT_MAX keys ("none") splits as no window: its key count does not wrap.
  a.num_splits = 0;
  a.max_seq_len = 32768;
  a.kv = {dummy, dummy, 512, 64, dummy, 512};
  DecodeArguments wide = a;
  wide.window = std::numeric_limits<int>::max();
  EXPECT_EQ(decode_num_splits(wide), decode_num_splits(a));
}

}  // namespace
}  // namespace skipsoftmax
