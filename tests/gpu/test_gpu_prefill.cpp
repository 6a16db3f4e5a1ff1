// The Hopper prefill kernels against the CPU reference (float64), on the GPU. Skipped cleanly on
// machines without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu_harness.h"

namespace skipsoftmax::gpu {
namespace {

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

struct Result {
  std::vector<double> out;  // [total_q, hq, dim], widened from the 16-bit output
  std::vector<std::uint16_t> bits;
  std::vector<unsigned long long> stats;  // [batch][2]
  KernelChoice kernel;
};

Result run_gpu(const HostBatch& b, bool causal, const Threshold& th, KvOrder order,
               std::optional<KernelChoice> force = std::nullopt) {
  DeviceBatch d(b);
  DeviceBuffer stats(b.q_lens.size() * 2 * sizeof(unsigned long long));
  check(cudaMemset(stats.get(), 0, stats.bytes()), "memset");
  PrefillArguments a = prefill_args(b, d, causal, th, order);
  a.stats = static_cast<unsigned long long*>(stats.get());
  a.force_kernel = force;
  Result r;
  r.kernel = run_prefill(a, nullptr, nullptr);
  check(cudaDeviceSynchronize(), "prefill");
  const std::size_t n = static_cast<std::size_t>(d.total_q) * b.hq * b.dim;
  const auto all = d.out.download<std::uint16_t>(d.out.bytes() / 2);
  // Nothing past the last sequence may be written.
  for (std::size_t i = n; i < all.size(); ++i) {
    if (all[i] != nan_bits(b.dtype)) {
      ADD_FAILURE() << "output element " << i << " past the batch was written";
      break;
    }
  }
  r.bits.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  r.out.resize(n);
  for (std::size_t i = 0; i < n; ++i) r.out[i] = from_bits(r.bits[i], b.dtype);
  r.stats = stats.download<unsigned long long>(b.q_lens.size() * 2);
  return r;
}

AttentionStats run_cpu(const HostBatch& b, bool causal, const Threshold& th, KvOrder order,
                       std::vector<double>& out) {
  ReferenceOptions o;
  o.threshold = th;
  o.tiles = prefill_vote_tiles(b.dim, order);
  out.assign(b.q.size() / b.dim * b.dim, 0.0);
  return reference_prefill(reference_problem(b, causal), o, out.data());
}

struct Shape {
  DType dtype;
  int dim;
  bool causal;
};

std::string name(const Shape& s) {
  return std::string(to_string(s.dtype)) + " d" + std::to_string(s.dim) +
         (s.causal ? " causal" : " non-causal");
}

std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes;
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int d : {64, 128, 256}) {
      for (bool c : {true, false}) shapes.push_back({t, d, c});
    }
  }
  return shapes;
}

bool compiled(const Shape& s) {
  PrefillArguments probe;
  probe.dtype = s.dtype;
  probe.head_dim = s.dim;
  return can_implement(probe).find("this build has only") == std::string::npos;
}

// Query and KV head counts: GQA groups of two, MHA, and groups of three.
struct Heads {
  int q, kv;
};
constexpr Heads kHeadConfigs[] = {{4, 2}, {3, 3}, {6, 2}};

TEST(GpuPrefill, DenseMatchesReferenceOnRaggedAwkwardLengths) {
  REQUIRE_HOPPER();
  for (const Shape& s : all_shapes()) {
    if (!compiled(s)) continue;
    for (const Heads h : kHeadConfigs) {
      // Lengths off every tile multiple; with causal, a chunk with history (300 of 1500).
      const std::vector<std::int64_t> q = {1, 127, 129, 700, s.causal ? 300 : 1500};
      const std::vector<std::int64_t> k = {1, 127, 129, 700, 1500};
      const HostBatch b = make_host_batch(s.dtype, h.q, h.kv, s.dim, q, k, 101);
      const Result r = run_gpu(b, s.causal, Threshold::dense(), KvOrder::kSinkThenReverse);
      EXPECT_EQ(r.kernel, KernelChoice::kDense);
      std::vector<double> ref;
      run_cpu(b, s.causal, Threshold::dense(), KvOrder::kSinkThenReverse, ref);
      const std::string what =
          name(s) + " Hq=" + std::to_string(h.q) + " Hkv=" + std::to_string(h.kv);
      for (double x : r.out) ASSERT_FALSE(std::isnan(x)) << what << ": NaN in the output";
      EXPECT_LT(rel_l2(r.out, ref), tolerance(s.dtype)) << what;
    }
  }
}

TEST(GpuPrefill, DenseMatchesReferenceOnRandomInputs) {
  REQUIRE_HOPPER();
  for (const Shape& s : all_shapes()) {
    if (!compiled(s)) continue;
    SyntheticSpec random;  // no sink, no band: i.i.d. scores
    random.sink = 0.0;
    random.local = 0.0;
    random.noise = 1.0;
    const HostBatch b = make_host_batch(s.dtype, 8, 1, s.dim, {1000, 33}, {1000, 33}, 7, random);
    const Result r = run_gpu(b, s.causal, Threshold::dense(), KvOrder::kForward);
    std::vector<double> ref;
    run_cpu(b, s.causal, Threshold::dense(), KvOrder::kForward, ref);
    EXPECT_LT(rel_l2(r.out, ref), tolerance(s.dtype)) << name(s);
  }
}

// Skip decisions may differ from the reference only where a tile's gap sits within float
// rounding of ln(lambda): allow 0.5% of the tiles (documented in docs/KERNELS.md).
std::int64_t g_disagreements = 0, g_tiles = 0;  // over all comparisons, for the log

void expect_stats_agree(const Result& r, const AttentionStats& ref, const std::string& what) {
  gpu::expect_stats_agree(r.stats, ref, what, g_disagreements, g_tiles);
}

TEST(GpuPrefill, SkipMatchesReferenceOutputAndDecisions) {
  REQUIRE_HOPPER();
  for (const Shape& s : all_shapes()) {
    if (!compiled(s)) continue;
    const std::vector<std::int64_t> q = {2100, 129, s.causal ? 700 : 3000};
    const std::vector<std::int64_t> k = {2100, 129, 3000};
    for (const Heads h : kHeadConfigs) {
      const HostBatch b = make_host_batch(s.dtype, h.q, h.kv, s.dim, q, k, 211);
      for (double lambda : {1e-4, 1e-3, 1e-2}) {
        for (KvOrder order : {KvOrder::kForward, KvOrder::kReverse, KvOrder::kSinkThenReverse}) {
          const Threshold th = Threshold::flat(lambda);
          const std::string what = name(s) + " Hq=" + std::to_string(h.q) +
                                   " Hkv=" + std::to_string(h.kv) + " lambda " +
                                   std::to_string(lambda) + " " + to_string(order);
          const Result r = run_gpu(b, s.causal, th, order);
          EXPECT_EQ(r.kernel, KernelChoice::kSkip);
          std::vector<double> ref;
          const AttentionStats st = run_cpu(b, s.causal, th, order, ref);
          EXPECT_LT(rel_l2(r.out, ref), tolerance(s.dtype)) << what;
          expect_stats_agree(r, st, what);
        }
      }
    }
  }
  std::printf("skip decisions: %lld of %lld visited tiles differ from the CPU reference\n",
              static_cast<long long>(g_disagreements), static_cast<long long>(g_tiles));
}

TEST(GpuPrefill, PerLengthTableGivesEachSequenceItsLambda) {
  REQUIRE_HOPPER();
  const Shape s{DType::kBF16, 128, true};
  // 300 lies below the first bin (dense by the guard); 2500 and 5000 use S = 2 and S = 8.
  const HostBatch b =
      make_host_batch(s.dtype, 4, 1, s.dim, {300, 2500, 5000}, {300, 2500, 5000}, 5);
  const Threshold th = Threshold::table(ScaleTable({{1024, 2.0}, {4096, 8.0}}));
  const Result r = run_gpu(b, true, th, KvOrder::kSinkThenReverse);
  EXPECT_EQ(r.kernel, KernelChoice::kSkip);
  std::vector<double> ref;
  const AttentionStats st = run_cpu(b, true, th, KvOrder::kSinkThenReverse, ref);
  EXPECT_EQ(st.sequences[0].tiles_skipped, 0);
  EXPECT_EQ(r.stats[1], 0u);
  EXPECT_GT(st.sequences[2].tiles_skipped, 0);
  EXPECT_LT(rel_l2(r.out, ref), tolerance(s.dtype));
  expect_stats_agree(r, st, "table");
}

// One lambda per sequence read from device memory, and each row's log-sum-exp: the output, the
// decisions and the lse of the CPU reference given the same lambdas. Sequences at 0, NaN and 1.5
// run dense (the bits of the dense kernel); nothing past the batch's rows of lse is written.
TEST(GpuPrefill, PerSequenceLambdasAndLseMatchReference) {
  REQUIRE_HOPPER();
  const std::vector<float> lambdas = {1e-3f, 1e-2f, 3e-3f, 0.f, std::nanf(""), 1.5f};
  for (const Shape& s : all_shapes()) {
    if (!compiled(s)) continue;
    const std::vector<std::int64_t> q = {2100, 129, s.causal ? 700 : 3000, 300, 1000, 77};
    const std::vector<std::int64_t> k = {2100, 129, 3000, 300, 1000, 77};
    const HostBatch b = make_host_batch(s.dtype, 6, 2, s.dim, q, k, 17);
    const std::string what = name(s);
    DeviceBatch d(b);
    const std::size_t rows = static_cast<std::size_t>(d.total_q) * b.hq;
    DeviceBuffer dl(lambdas.size() * sizeof(float)), lse((rows + 64) * sizeof(float)),
        stats(lambdas.size() * 2 * sizeof(unsigned long long));
    dl.upload(lambdas);
    lse.upload(std::vector<float>(rows + 64, std::nanf("")));
    check(cudaMemset(stats.get(), 0, stats.bytes()), "memset");
    PrefillArguments a =
        prefill_args(b, d, s.causal, Threshold::dense(), KvOrder::kSinkThenReverse);
    a.lambdas = static_cast<const float*>(dl.get());
    a.lse = static_cast<float*>(lse.get());
    a.stats = static_cast<unsigned long long*>(stats.get());
    EXPECT_EQ(run_prefill(a, nullptr, nullptr), KernelChoice::kSkip);
    check(cudaDeviceSynchronize(), "prefill");
    const auto bits = d.out.download<std::uint16_t>(rows * b.dim);
    const auto gpu_lse = lse.download<float>(rows + 64);
    for (std::size_t i = rows; i < gpu_lse.size(); ++i) {
      ASSERT_TRUE(std::isnan(gpu_lse[i])) << what << ": lse written past the batch";
    }

    ReferenceOptions o;
    o.lambdas = lambdas;
    o.tiles = prefill_vote_tiles(b.dim, KvOrder::kSinkThenReverse);
    std::vector<double> ref(rows * b.dim), ref_lse(rows);
    o.lse = ref_lse.data();
    const AttentionStats st = reference_prefill(reference_problem(b, s.causal), o, ref.data());
    std::vector<double> out(rows * b.dim);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = from_bits(bits[i], b.dtype);
    EXPECT_LT(rel_l2(out, ref), tolerance(s.dtype)) << what;
    Result r;
    r.stats = stats.download<unsigned long long>(lambdas.size() * 2);
    expect_stats_agree(r, st, what);
    std::vector<bool> dense_rows(rows, false);
    for (std::size_t i = 3; i < lambdas.size(); ++i) {
      EXPECT_EQ(st.sequences[i].tiles_skipped, 0) << what << " sequence " << i;
      for (std::int64_t r = b.cu_q[i] * b.hq; r < b.cu_q[i + 1] * b.hq; ++r) dense_rows[r] = true;
    }
    gpu::expect_lse_close({gpu_lse.begin(), gpu_lse.begin() + rows}, ref_lse, dense_rows, what);
    // The dense sequences carry the dense kernel's bits.
    const Result dense = run_gpu(b, s.causal, Threshold::dense(), KvOrder::kSinkThenReverse);
    const std::size_t from = static_cast<std::size_t>(b.cu_q[3]) * b.hq * b.dim;
    EXPECT_TRUE(std::equal(bits.begin() + from, bits.end(), dense.bits.begin() + from)) << what;
  }
}

TEST(GpuPrefill, SkipKernelAtLambdaZeroIsBitIdenticalToDense) {
  REQUIRE_HOPPER();
  for (const Shape& s : all_shapes()) {
    if (!compiled(s)) continue;
    const HostBatch b = make_host_batch(s.dtype, 4, 2, s.dim, {1000, 77}, {1000, 77}, 31);
    // Every order: a row meets tiles it cannot see (its CTA's rows reach further) at other
    // positions of its visit in each (reverse: first).
    for (KvOrder order : {KvOrder::kForward, KvOrder::kReverse, KvOrder::kSinkThenReverse}) {
      const Result dense = run_gpu(b, s.causal, Threshold::dense(), order);
      const Result skip = run_gpu(b, s.causal, Threshold::dense(), order, KernelChoice::kSkip);
      EXPECT_EQ(skip.kernel, KernelChoice::kSkip);
      EXPECT_TRUE(dense.bits == skip.bits) << name(s) << " " << to_string(order);
      EXPECT_EQ(skip.stats[1] + skip.stats[3], 0u) << name(s);
    }
  }
}

// Outside the contract (a causal chunk longer than its KV), whole CTAs see no key: the host cannot
// tell (the lengths live on the device), and the kernels must still finish rather than wait for K
// tiles that never come.
TEST(GpuPrefill, CausalChunkLongerThanItsKvFinishes) {
  REQUIRE_HOPPER();
  for (const int dim : {64, 128}) {
    const Shape s{DType::kBF16, dim, true};
    if (!compiled(s)) continue;
    const HostBatch b = make_host_batch(DType::kBF16, 2, 1, dim, {1000}, {100}, 5);
    EXPECT_EQ(run_gpu(b, true, Threshold::dense(), KvOrder::kSinkThenReverse).kernel,
              KernelChoice::kDense);
    EXPECT_EQ(
        run_gpu(b, true, Threshold::flat(1e-3), KvOrder::kSinkThenReverse, KernelChoice::kSkip)
            .kernel,
        KernelChoice::kSkip);
  }
}

TEST(GpuPrefill, DispatchPicksDenseBelowTheFirstSkippableLength) {
  REQUIRE_HOPPER();
  const HostBatch b = make_host_batch(DType::kBF16, 2, 1, 128, {500}, {500}, 3);
  const Threshold th = Threshold::table(ScaleTable({{4096, 10.0}}));
  EXPECT_EQ(run_gpu(b, true, th, KvOrder::kForward).kernel, KernelChoice::kDense);
  // With KV history too the longest KV length decides: below the first bin the dense kernel,
  // with the guard's bits; from it on the skip kernel.
  const HostBatch h = make_host_batch(DType::kBF16, 2, 1, 128, {100, 100}, {500, 300}, 3);
  const Result dense = run_gpu(h, true, th, KvOrder::kForward);
  EXPECT_EQ(dense.kernel, KernelChoice::kDense);
  EXPECT_TRUE(dense.bits == run_gpu(h, true, th, KvOrder::kForward, KernelChoice::kSkip).bits);
  const HostBatch longer = make_host_batch(DType::kBF16, 2, 1, 128, {100, 100}, {5000, 300}, 3);
  EXPECT_EQ(run_gpu(longer, true, th, KvOrder::kForward).kernel, KernelChoice::kSkip);
  const HostBatch one = make_host_batch(DType::kBF16, 2, 1, 128, {100}, {500}, 3);
  EXPECT_EQ(run_gpu(one, true, th, KvOrder::kForward).kernel, KernelChoice::kDense);
}

// A batch of one in a row whose S >= L runs the dense kernel, with the bits the skip kernel's
// guard gives.
TEST(GpuPrefill, DispatchRunsABatchOfOneInAGuardedRowDense) {
  REQUIRE_HOPPER();
  const HostBatch b = make_host_batch(DType::kBF16, 4, 2, 128, {3000}, {3000}, 9);
  const Threshold th = Threshold::table(ScaleTable({{256, 4.0}, {2048, 5000.0}}));
  const Result r = run_gpu(b, true, th, KvOrder::kSinkThenReverse);
  EXPECT_EQ(r.kernel, KernelChoice::kDense);
  const Result guard = run_gpu(b, true, th, KvOrder::kSinkThenReverse, KernelChoice::kSkip);
  EXPECT_TRUE(r.bits == guard.bits);
  EXPECT_EQ(guard.stats[1], 0u);
  const HostBatch shorter = make_host_batch(DType::kBF16, 4, 2, 128, {1500}, {1500}, 9);
  EXPECT_EQ(run_gpu(shorter, true, th, KvOrder::kSinkThenReverse).kernel, KernelChoice::kSkip);
}

TEST(GpuPrefill, CanImplementNamesTheProblem) {
  PrefillArguments a;
  a.head_dim = 96;
  EXPECT_NE(can_implement(a).find("head_dim 96"), std::string::npos);
  a.head_dim = 128;
  a.num_heads_q = 6;
  a.num_heads_kv = 4;
  EXPECT_NE(can_implement(a).find("Hq % Hkv"), std::string::npos);
  EXPECT_THROW(run_prefill(a, nullptr, nullptr), std::invalid_argument);
  // A valid launch (pointers checked, not read), then one problem at a time.
  alignas(16) static int dummy[4];
  a.num_heads_q = 32;
  a.num_heads_kv = 8;
  a.q = a.k = a.v = a.out = dummy;
  a.cu_seqlens_q = a.cu_seqlens_k = dummy;
  a.batch = 1;
  a.total_q = a.total_k = a.max_seqlen_q = a.max_seqlen_k = 4096;
  ASSERT_EQ(can_implement(a), "");
  const auto problem = [&](auto change) {
    PrefillArguments b = a;
    change(b);
    return can_implement(b);
  };
  EXPECT_NE(problem([](PrefillArguments& b) {
              b.paged_kv.page_table = dummy;
            }).find("paged_kv is set but its k_pages is NULL"),
            std::string::npos);
  EXPECT_NE(problem([](PrefillArguments& b) { b.max_seqlen_q = 5000; }).find("cannot exceed"),
            std::string::npos);
  EXPECT_NE(problem([](PrefillArguments& b) { b.max_seqlen_k = 5000; }).find("cannot exceed"),
            std::string::npos);
  EXPECT_NE(problem([](PrefillArguments& b) {
              b.batch = 70000;
              b.total_q = b.total_k = 1 << 20;
            }).find("must be at most 65535"),
            std::string::npos);
  EXPECT_NE(problem([](PrefillArguments& b) { b.softmax_scale = 1e39; }).find("finite float"),
            std::string::npos);
  EXPECT_NE(problem([](PrefillArguments& b) {
              b.paged_kv = {dummy, dummy, 1 << 20, 64, dummy, 1 << 15};
              b.batch = 1 << 16;
              b.total_q = b.total_k = 1 << 20;
            }).find("page-table entries"),
            std::string::npos);
}

// run_prefill_host checks the arguments and its host tensors before it looks for a GPU, so that
// the same message names a bad argument on any machine (pure host logic).
TEST(GpuPrefill, HostWrapperChecksItsTensorsFirst) {
  PrefillArguments a;  // bf16, head dim 128: compiled in every build
  a.num_heads_q = 2;
  a.num_heads_kv = 1;
  a.batch = 2;
  a.total_q = a.total_k = 8;
  a.max_seqlen_q = a.max_seqlen_k = 5;
  const std::vector<std::uint16_t> q(8 * 2 * 128), kv(8 * 128);
  const std::vector<std::int32_t> cu = {0, 3, 8};
  const auto message = [&](const PrefillArguments& args, const std::vector<std::uint16_t>& qq,
                           const std::vector<std::int32_t>& cu_q) -> std::string {
    try {
      run_prefill_host(args, qq, kv, kv, cu_q, cu);
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::runtime_error&) {
      return "";  // the GPU check, or the GPU itself: the arguments passed
    }
    return "";
  };
  EXPECT_EQ(message(a, q, cu), "");
  EXPECT_NE(message(a, std::vector<std::uint16_t>(7), cu).find("q holds 7 values"),
            std::string::npos);
  EXPECT_NE(message(a, q, {0, 3, 7}).find("cu_seqlens_q must run from 0 to 8"), std::string::npos);
  EXPECT_NE(message(a, q, {0, 6, 8}).find("the longest sequence holds 6 tokens"),
            std::string::npos);
  PrefillArguments d = a;
  d.head_dim = 96;
  EXPECT_NE(message(d, q, cu).find("head_dim 96"), std::string::npos);
}

}  // namespace
}  // namespace skipsoftmax::gpu
