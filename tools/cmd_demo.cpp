// `skipsoftmax demo`: the main job. Runs skip-softmax attention on inputs with the structure of
// real attention (sink, local band, far field) next to dense attention, and prints the tile
// sparsity, the error against dense and the timings: with the Hopper kernels when this build has
// them and a Hopper GPU is present, else with the CPU reference (which also reports the skipped
// softmax mass).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bits16.h"
#include "commands.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"
#include "table_json.h"

namespace skipsoftmax::cli {
namespace {

struct DemoArgs {
  std::string backend = "auto";
  std::optional<std::int64_t> seq_len;  // default 4096 on the CPU, 16384 on the GPU
  int batch = 1;
  std::optional<int> heads_q;   // default 8 on the CPU, 32 on the GPU
  std::optional<int> heads_kv;  // default 2 on the CPU, 8 on the GPU
  int head_dim = 128;
  bool non_causal = false;
  std::optional<double> threshold;
  std::string scale_table;
  int tile_q = 128;
  int tile_k = 128;
  std::string kv_order = "sink-reverse";
  int threads = 0;
  std::uint64_t seed = 1;
  SyntheticSpec shape;  // sink, band and far-field strengths
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 4 * d FLOPs per visible score (QK^T and P.V); causal keeps about half of the L x L scores.
double attention_flops(std::int64_t len, int batch, int heads, int dim, bool causal) {
  const double scores = causal ? 0.5 * double(len) * double(len + 1) : double(len) * double(len);
  return 4.0 * dim * scores * heads * batch;
}

struct DemoInputs {
  PrefillProblem problem;
  std::vector<float> q, k, v;
  std::int64_t seq_len;
  int batch, heads_q, heads_kv, head_dim;
};

DemoInputs make_inputs(const DemoArgs& a, bool gpu) {
  DemoInputs in;
  in.seq_len = a.seq_len.value_or(gpu ? 16384 : 4096);
  in.batch = a.batch;
  in.heads_q = a.heads_q.value_or(gpu ? 32 : 8);
  in.heads_kv = a.heads_kv.value_or(gpu ? 8 : 2);
  in.head_dim = a.head_dim;
  PrefillProblem& p = in.problem;
  p.cu_seqlens_q = {0};
  for (int b = 0; b < a.batch; ++b) {
    SyntheticSpec spec = a.shape;
    spec.tokens = in.seq_len;
    spec.num_heads_q = in.heads_q;
    spec.num_heads_kv = in.heads_kv;
    spec.head_dim = in.head_dim;
    spec.seed = a.seed + static_cast<std::uint64_t>(b);
    const SyntheticQkv s = make_structured_qkv(spec);
    in.q.insert(in.q.end(), s.q.begin(), s.q.end());
    in.k.insert(in.k.end(), s.k.begin(), s.k.end());
    in.v.insert(in.v.end(), s.v.begin(), s.v.end());
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + in.seq_len);
  }
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.num_heads_q = in.heads_q;
  p.num_heads_kv = in.heads_kv;
  p.head_dim = in.head_dim;
  p.causal = !a.non_causal;
  return in;
}

Threshold demo_threshold(const DemoArgs& a, std::int64_t seq_len) {
  if (!a.scale_table.empty()) {
    if (a.threshold) throw std::invalid_argument("give --threshold or --scale-table, not both");
    return Threshold::table(read_scale_table_file(a.scale_table));
  }
  if (a.threshold) return Threshold::flat(*a.threshold);
  // lambda = S / L with S = L / 1000: a mild 1e-3 at this length, the paper's operating range.
  return Threshold::table(ScaleTable({{1, double(seq_len) * 1e-3}}));
}

double rel_l2(const std::vector<double>& x, const std::vector<double>& ref, double* max_abs) {
  double num = 0.0, den = 0.0;
  *max_abs = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    *max_abs = std::max(*max_abs, std::abs(d));
  }
  return std::sqrt(num / den);
}

void print_header(const DemoArgs& a, const DemoInputs& in, const char* where, const Threshold& th) {
  std::printf("skipsoftmax demo: %s, %d x %lld tokens, Hq=%d Hkv=%d D=%d, %s\n", where, in.batch,
              static_cast<long long>(in.seq_len), in.heads_q, in.heads_kv, in.head_dim,
              in.problem.causal ? "causal" : "non-causal");
  std::printf(
      "inputs: synthetic real-structure attention (scores: sink %.3g, band %.3g, far field "
      "spread %.3g)\n",
      a.shape.sink, a.shape.local, a.shape.noise);
  std::printf("KV order %s, threshold: %s\n", a.kv_order.c_str(), th.describe().c_str());
}

void run_cpu_demo(const DemoArgs& a, KvOrder order) {
  const DemoInputs in = make_inputs(a, false);
  const Threshold threshold = demo_threshold(a, in.seq_len);
  print_header(a, in, "CPU reference (float64)", threshold);
  const PrefillProblem& p = in.problem;
  ReferenceOptions opt;
  opt.tiles = {a.tile_q, a.tile_k, order};
  opt.num_threads = a.threads;
  std::vector<double> dense(in.q.size()), skip(in.q.size());
  const double flops = attention_flops(in.seq_len, in.batch, in.heads_q, in.head_dim, p.causal);
  std::printf("tiles %dx%d\n", a.tile_q, a.tile_k);

  auto t0 = std::chrono::steady_clock::now();
  opt.threshold = Threshold::dense();
  reference_prefill(p, opt, dense.data());
  const double t_dense = seconds_since(t0);
  opt.threshold = threshold;
  t0 = std::chrono::steady_clock::now();
  const AttentionStats stats = reference_prefill(p, opt, skip.data());
  const double t_skip = seconds_since(t0);

  double max_abs = 0.0;
  const double err = rel_l2(skip, dense, &max_abs);
  std::printf("\n%-8s %10s %10s %12s\n", "run", "time (s)", "GFLOP/s", "sparsity");
  std::printf("%-8s %10.2f %10.2f %11.1f%%\n", "dense", t_dense, flops / t_dense * 1e-9, 0.0);
  std::printf("%-8s %10.2f %10s %11.1f%%\n", "skip", t_skip, "-", 100.0 * stats.sparsity());
  std::printf("\nlambda per sequence: %.3g (L = %lld)\n", stats.sequences.front().lambda,
              static_cast<long long>(stats.sequences.front().kv_len));
  std::printf("tiles skipped: %lld of %lld (%.1f%%)\n", static_cast<long long>(stats.tiles_skipped),
              static_cast<long long>(stats.tiles_total), 100.0 * stats.sparsity());
  std::printf("softmax mass in skipped tiles: mean %.3g per row\n", stats.mass_share);
  std::printf("error against dense: relative L2 %.3g, max abs %.3g\n", err, max_abs);
}

#if SKIPSOFTMAX_HAVE_CUDA
void run_gpu_demo(const DemoArgs& a, KvOrder order) {
  const DemoInputs in = make_inputs(a, true);
  const Threshold threshold = demo_threshold(a, in.seq_len);
  print_header(a, in, "Hopper kernels, bf16", threshold);
  const TileShape tiles = prefill_vote_tiles(in.head_dim, order);
  std::printf("vote tiles %dx%d (one consumer warpgroup x one KV tile)\n", tiles.tile_q,
              tiles.tile_k);
  const std::vector<std::uint16_t> q = to_bits(in.q, DType::kBF16), k = to_bits(in.k, DType::kBF16),
                                   v = to_bits(in.v, DType::kBF16);
  std::vector<std::int32_t> cu(in.problem.cu_seqlens_q.begin(), in.problem.cu_seqlens_q.end());
  PrefillArguments args;
  args.dtype = DType::kBF16;
  args.head_dim = in.head_dim;
  args.batch = in.batch;
  args.total_q = args.total_k = cu.back();
  args.max_seqlen_q = args.max_seqlen_k = static_cast<int>(in.seq_len);
  args.num_heads_q = in.heads_q;
  args.num_heads_kv = in.heads_kv;
  args.causal = in.problem.causal;
  args.kv_order = order;
  // Each run once to load the kernel, then the timed one.
  const auto run = [&](const Threshold& th) {
    args.threshold = th;
    run_prefill_host(args, q, k, v, cu, cu);
    return run_prefill_host(args, q, k, v, cu, cu);
  };
  const HostPrefillResult dense = run(Threshold::dense());
  const HostPrefillResult skip = run(threshold);
  const std::vector<double> d = from_bits(dense.out, DType::kBF16),
                            s = from_bits(skip.out, DType::kBF16);
  unsigned long long visited = 0, skipped = 0;
  for (int b = 0; b < in.batch; ++b) {
    visited += skip.stats[2 * b];
    skipped += skip.stats[2 * b + 1];
  }
  const double sparsity = visited ? double(skipped) / double(visited) : 0.0;
  const double flops =
      attention_flops(in.seq_len, in.batch, in.heads_q, in.head_dim, in.problem.causal);
  double max_abs = 0.0;
  const double err = rel_l2(s, d, &max_abs);
  std::printf("\n%-6s %-8s %10s %10s %12s\n", "run", "kernel", "time (ms)", "TFLOPS", "sparsity");
  std::printf("%-6s %-8s %10.3f %10.1f %11.1f%%\n", "dense", to_string(dense.kernel),
              dense.kernel_ms, flops / dense.kernel_ms * 1e-9, 0.0);
  std::printf("%-6s %-8s %10.3f %10.1f %11.1f%%\n", "skip", to_string(skip.kernel), skip.kernel_ms,
              flops / skip.kernel_ms * 1e-9, 100.0 * sparsity);
  std::printf("\nlambda per sequence: %.3g (L = %lld)\n", threshold.lambda_for(in.seq_len),
              static_cast<long long>(in.seq_len));
  std::printf(
      "tiles skipped: %llu of %llu (%.1f%%), speedup %.2fx (one launch each; "
      "bench/prefill_bench for medians)\n",
      skipped, visited, 100.0 * sparsity, dense.kernel_ms / skip.kernel_ms);
  std::printf("error against dense: relative L2 %.3g, max abs %.3g\n", err, max_abs);
}
#endif

void run_demo(const DemoArgs& a) {
  check_threads(a.threads);
  const auto order = parse_kv_order(a.kv_order);
  if (!order) {
    throw std::invalid_argument("unknown --kv-order '" + a.kv_order +
                                "' (valid: " + kv_order_names() + ")");
  }
  if (a.backend != "auto" && a.backend != "cpu" && a.backend != "cuda") {
    throw std::invalid_argument("unknown --backend '" + a.backend + "' (valid: auto, cpu, cuda)");
  }
#if SKIPSOFTMAX_HAVE_CUDA
  const bool gpu = a.backend == "cuda" || (a.backend == "auto" && hopper_gpu_available());
  if (gpu) {
    run_gpu_demo(a, *order);
    return;
  }
#else
  if (a.backend == "cuda") {
    throw std::invalid_argument("--backend cuda: this build has no GPU kernels");
  }
#endif
  run_cpu_demo(a, *order);
}

void add_demo(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Main job: skip-softmax vs dense attention on real-structure inputs (GPU or CPU)");
  cmd->add_option("--backend", args->backend, "auto (the GPU when there is one), cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--seq-len", args->seq_len, "Tokens per sequence (4096 CPU, 16384 GPU)")
      ->check(kPositive);
  cmd->add_option("--batch", args->batch, "Sequences")->check(kPositive);
  cmd->add_option("--heads-q", args->heads_q, "Query heads (8 CPU, 32 GPU)")->check(kPositive);
  cmd->add_option("--heads-kv", args->heads_kv, "KV heads (2 CPU, 8 GPU)")->check(kPositive);
  cmd->add_option("--head-dim", args->head_dim, "Head dimension")->check(kPositive);
  cmd->add_flag("--non-causal", args->non_causal, "Full (non-causal) attention");
  cmd->add_option("--threshold", args->threshold, "Flat lambda in [0, 1)");
  cmd->add_option("--scale-table", args->scale_table, "Scale table JSON [[seqlen_bin, S], ...]");
  cmd->add_option("--tile-q", args->tile_q, "Query rows per tile")->check(kPositive);
  cmd->add_option("--tile-k", args->tile_k, "Keys per tile")->check(kPositive);
  cmd->add_option("--kv-order", args->kv_order, "forward, reverse or sink-reverse");
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)");
  cmd->add_option("--seed", args->seed, "Input seed")->check(kNonNegative);
  cmd->add_option("--sink", args->shape.sink, "Score of every query against key 0")->check(kFinite);
  cmd->add_option("--band", args->shape.local, "Score of a query against its own position")
      ->check(kFinite);
  cmd->add_option("--far-field", args->shape.noise, "Spread of the far-field scores")
      ->check(kPositive);
  cmd->callback([args] { run_demo(*args); });
}

const Registration reg{10, &add_demo};

}  // namespace
}  // namespace skipsoftmax::cli
