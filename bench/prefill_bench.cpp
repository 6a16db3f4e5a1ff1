// Prefill benchmark: our dense kernel, the skip kernel at lambda = 0 (the vote's cost) and the
// skip kernel across lambdas (the speedup-versus-sparsity curve), on real-structure inputs larger
// than L2. Prints a table and writes JSON (command, git revision, GPU, every measurement).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_record.h"
#include "bench_util.h"
#include "skipsoftmax/prefill.h"
#include "structured_inputs.cuh"

namespace {

using namespace skipsoftmax;
using bench::check;

struct Options {
  std::vector<int> lengths = {4096, 8192, 16384, 32768, 65536};
  std::int64_t tokens = 65536;  // batch = tokens / length, at least 1
  int heads_q = 32, heads_kv = 8, head_dim = 128;
  std::string dtype = "bf16";
  bool non_causal = false;
  std::vector<double> lambdas = {1e-6, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3};
  std::string order = "sink-reverse";
  int warmup = 3, iters = 1, rounds = 20;
  std::string json;
  std::string command;
};

struct Inputs {
  void* q;
  void* k;
  void* v;
  void* out;
  std::int32_t* cu;
  unsigned long long* stats;
};

nlohmann::json run_length(const Options& o, int len, std::FILE* table) {
  const int batch = static_cast<int>(std::max<std::int64_t>(1, o.tokens / len));
  const std::int64_t total = static_cast<std::int64_t>(batch) * len;
  const bool bf16 = o.dtype == "bf16";
  const bool causal = !o.non_causal;
  const std::size_t q_bytes = total * o.heads_q * o.head_dim * 2;
  const std::size_t kv_bytes = total * o.heads_kv * o.head_dim * 2;
  Inputs in{};
  check(cudaMalloc(&in.q, q_bytes), "malloc q");
  check(cudaMalloc(&in.k, kv_bytes), "malloc k");
  check(cudaMalloc(&in.v, kv_bytes), "malloc v");
  check(cudaMalloc(&in.out, q_bytes), "malloc out");
  check(cudaMalloc(&in.cu, (batch + 1) * 4), "malloc cu");
  check(cudaMalloc(&in.stats, batch * 2 * 8), "malloc stats");
  std::vector<std::int32_t> cu(batch + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b * len;
  check(cudaMemcpy(in.cu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), "cu");
  const bench::StructuredShape shape;
  bench::fill_structured(in.q, bf16, total, o.heads_q, o.head_dim, len, bench::Role::kQuery, shape,
                         1, nullptr);
  bench::fill_structured(in.k, bf16, total, o.heads_kv, o.head_dim, len, bench::Role::kKey, shape,
                         2, nullptr);
  bench::fill_structured(in.v, bf16, total, o.heads_kv, o.head_dim, len, bench::Role::kValue, shape,
                         3, nullptr);
  check(cudaDeviceSynchronize(), "fill");

  PrefillArguments a;
  a.dtype = bf16 ? DType::kBF16 : DType::kF16;
  a.head_dim = o.head_dim;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.out = in.out;
  a.cu_seqlens_q = in.cu;
  a.cu_seqlens_k = in.cu;
  a.batch = batch;
  a.total_q = a.total_k = total;
  a.max_seqlen_q = a.max_seqlen_k = len;
  a.num_heads_q = o.heads_q;
  a.num_heads_kv = o.heads_kv;
  a.causal = causal;
  a.kv_order = *parse_kv_order(o.order);

  const double scores = causal ? 0.5 * double(len) * double(len + 1) : double(len) * len;
  const double flops = 4.0 * o.head_dim * scores * o.heads_q * batch;
  nlohmann::json rows = nlohmann::json::array();
  auto record = [&](const std::string& arm, double lambda, double ms, double sparsity,
                    double dense_ms) {
    const double tflops = flops / (ms * 1e-3) * 1e-12;
    std::fprintf(table, "%7d %5d %-18s %9.2g %9.3f %9.1f %8.1f%% %8.3fx\n", len, batch, arm.c_str(),
                 lambda, ms, tflops, 100 * sparsity, dense_ms / ms);
    rows.push_back({{"length", len},
                    {"batch", batch},
                    {"arm", arm},
                    {"lambda", lambda},
                    {"ms", ms},
                    {"tflops", tflops},
                    {"tile_sparsity", sparsity},
                    {"speedup_vs_dense", dense_ms / ms}});
  };

  // Sparsity of each lambda: one run with statistics.
  std::vector<double> sparsity;
  a.force_kernel = KernelChoice::kSkip;
  for (double lambda : o.lambdas) {
    a.threshold = Threshold::flat(lambda);
    check(cudaMemset(in.stats, 0, batch * 2 * 8), "memset");
    a.stats = in.stats;
    run_prefill(a, nullptr, nullptr);
    std::vector<unsigned long long> st(batch * 2);
    check(cudaMemcpy(st.data(), in.stats, st.size() * 8, cudaMemcpyDeviceToHost), "stats");
    double visited = 0, skipped = 0;
    for (int b = 0; b < batch; ++b) {
      visited += double(st[2 * b]);
      skipped += double(st[2 * b + 1]);
    }
    sparsity.push_back(visited > 0 ? skipped / visited : 0);
  }
  a.stats = nullptr;

  // Arms: dense, skip at lambda = 0, then per lambda the skip kernel without and with statistics.
  std::vector<std::function<void()>> arms;
  const auto arm = [&](KernelChoice kernel, Threshold th, unsigned long long* stats) {
    PrefillArguments args = a;
    args.force_kernel = kernel;
    args.threshold = std::move(th);
    args.stats = stats;
    arms.push_back([args] { run_prefill(args, nullptr, nullptr); });
  };
  arm(KernelChoice::kDense, Threshold::dense(), nullptr);
  arm(KernelChoice::kSkip, Threshold::dense(), nullptr);
  for (double lambda : o.lambdas) {
    arm(KernelChoice::kSkip, Threshold::flat(lambda), nullptr);
    arm(KernelChoice::kSkip, Threshold::flat(lambda), in.stats);
  }
  const std::vector<double> ms = bench::interleaved_median_ms(arms, o.warmup, o.rounds, o.iters);
  const double dense_ms = ms[0];
  record("dense", 0, dense_ms, 0, dense_ms);
  record("skip lambda=0", 0, ms[1], 0, dense_ms);
  for (std::size_t i = 0; i < o.lambdas.size(); ++i) {
    record("skip", o.lambdas[i], ms[2 + 2 * i], sparsity[i], dense_ms);
    rows.back()["ms_with_stats"] = ms[3 + 2 * i];
  }
  check(cudaGetLastError(), "launch");
  for (void* p :
       {in.q, in.k, in.v, in.out, static_cast<void*>(in.cu), static_cast<void*>(in.stats)}) {
    cudaFree(p);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Prefill kernels: dense, skip at lambda 0, skip across lambdas"};
  app.add_option("--lengths", o.lengths, "Sequence lengths");
  app.add_option("--tokens", o.tokens, "Tokens per launch (batch = tokens / length)");
  app.add_option("--heads-q", o.heads_q);
  app.add_option("--heads-kv", o.heads_kv);
  app.add_option("--head-dim", o.head_dim)->check(CLI::IsMember({64, 128, 256}));
  app.add_option("--dtype", o.dtype)->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_flag("--non-causal", o.non_causal);
  app.add_option("--lambdas", o.lambdas, "Flat thresholds for the skip arms");
  app.add_option("--kv-order", o.order)
      ->check(CLI::IsMember({"forward", "reverse", "sink-reverse"}));
  app.add_option("--warmup", o.warmup);
  app.add_option("--iters", o.iters, "Timed launches per arm and round")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "Round-robin rounds over the arms")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json, "Write the results here");
  CLI11_PARSE(app, argc, argv);
  o.command = bench::command_line(argc, argv);
  try {
    if (!hopper_gpu_available()) throw std::runtime_error("no Hopper GPU");
    std::printf("%s, %s, Hq=%d Hkv=%d D=%d, %s, KV order %s, median of %d interleaved\n",
                bench::device_properties().name, o.dtype.c_str(), o.heads_q, o.heads_kv, o.head_dim,
                o.non_causal ? "non-causal" : "causal", o.order.c_str(), o.rounds * o.iters);
    std::printf("%7s %5s %-18s %9s %9s %9s %9s %9s\n", "length", "batch", "arm", "lambda", "ms",
                "TFLOPS", "sparsity", "speedup");
    nlohmann::json results = nlohmann::json::array();
    for (int len : o.lengths) {
      for (auto& r : run_length(o, len, stdout)) results.push_back(r);
    }
    bench::write_record(
        {{"dtype", o.dtype},
         {"heads_q", o.heads_q},
         {"heads_kv", o.heads_kv},
         {"head_dim", o.head_dim},
         {"causal", !o.non_causal},
         {"kv_order", o.order},
         {"inputs", "synthetic real-structure (sink 12, band 8, far field 0.75)"},
         {"timing", "median of " + std::to_string(o.rounds * o.iters) +
                        " event-timed launches per arm, arms interleaved over " +
                        std::to_string(o.rounds) + " rounds (odd rounds reversed), after " +
                        std::to_string(o.warmup) + " warm-up launches"},
         {"results", results}},
        o.json, o.command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefill_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
