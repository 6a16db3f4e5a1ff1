// `skipsoftmax demo`: the main job. Runs skip-softmax attention on inputs with the structure of
// real attention (sink, local band, far field) next to dense attention, and prints the tile
// sparsity, the skipped mass and the error against dense, with timings.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"
#include "table_json.h"

namespace skipsoftmax::cli {
namespace {

struct DemoArgs {
  std::int64_t seq_len = 4096;
  int batch = 1;
  int heads_q = 8;
  int heads_kv = 2;
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

void run_demo(const DemoArgs& a) {
  const auto order = parse_kv_order(a.kv_order);
  if (!order) {
    throw std::invalid_argument("unknown --kv-order '" + a.kv_order + "' (valid: " +
                                kv_order_names() + ")");
  }
  Threshold threshold = Threshold::flat(a.threshold.value_or(0.0));
  if (!a.scale_table.empty()) {
    if (a.threshold) throw std::invalid_argument("give --threshold or --scale-table, not both");
    threshold = Threshold::table(read_scale_table_file(a.scale_table));
  } else if (!a.threshold) {
    // lambda = S / L with S = L / 1000: a mild 1e-3 at every length, the paper's operating range.
    threshold = Threshold::table(ScaleTable({{1, double(a.seq_len) * 1e-3}}));
  }

  PrefillProblem p;
  std::vector<float> q, k, v;
  p.cu_seqlens_q = {0};
  for (int b = 0; b < a.batch; ++b) {
    SyntheticSpec spec = a.shape;
    spec.tokens = a.seq_len;
    spec.num_heads_q = a.heads_q;
    spec.num_heads_kv = a.heads_kv;
    spec.head_dim = a.head_dim;
    spec.seed = a.seed + static_cast<std::uint64_t>(b);
    const SyntheticQkv s = make_structured_qkv(spec);
    q.insert(q.end(), s.q.begin(), s.q.end());
    k.insert(k.end(), s.k.begin(), s.k.end());
    v.insert(v.end(), s.v.begin(), s.v.end());
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + a.seq_len);
  }
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.num_heads_q = a.heads_q;
  p.num_heads_kv = a.heads_kv;
  p.head_dim = a.head_dim;
  p.causal = !a.non_causal;

  ReferenceOptions opt;
  opt.tiles = {a.tile_q, a.tile_k, *order};
  opt.num_threads = a.threads;
  const std::size_t n = q.size();
  std::vector<double> dense(n), skip(n);
  const double flops = attention_flops(a.seq_len, a.batch, a.heads_q, a.head_dim, p.causal);

  std::printf("skipsoftmax demo: CPU reference (float64), %d x %lld tokens, Hq=%d Hkv=%d D=%d, %s\n",
              a.batch, static_cast<long long>(a.seq_len), a.heads_q, a.heads_kv, a.head_dim,
              p.causal ? "causal" : "non-causal");
  std::printf("inputs: synthetic real-structure attention (scores: sink %.3g, band %.3g, far field "
              "spread %.3g)\n",
              a.shape.sink, a.shape.local, a.shape.noise);
  std::printf("tiles %dx%d, KV order %s, threshold: %s\n", a.tile_q, a.tile_k, a.kv_order.c_str(),
              threshold.describe().c_str());

  auto t0 = std::chrono::steady_clock::now();
  opt.threshold = Threshold::dense();
  reference_prefill(p, opt, dense.data());
  const double t_dense = seconds_since(t0);

  opt.threshold = threshold;
  t0 = std::chrono::steady_clock::now();
  const AttentionStats stats = reference_prefill(p, opt, skip.data());
  const double t_skip = seconds_since(t0);

  double num = 0.0, den = 0.0, max_abs = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = skip[i] - dense[i];
    num += d * d;
    den += dense[i] * dense[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  std::printf("\n%-8s %10s %10s %12s\n", "run", "time (s)", "GFLOP/s", "sparsity");
  std::printf("%-8s %10.2f %10.2f %11.1f%%\n", "dense", t_dense, flops / t_dense * 1e-9, 0.0);
  std::printf("%-8s %10.2f %10s %11.1f%%\n", "skip", t_skip, "-", 100.0 * stats.sparsity());
  std::printf("\nlambda per sequence: %.3g (L = %lld)\n", stats.sequences.front().lambda,
              static_cast<long long>(stats.sequences.front().kv_len));
  std::printf("tiles skipped: %lld of %lld (%.1f%%)\n", static_cast<long long>(stats.tiles_skipped),
              static_cast<long long>(stats.tiles_total), 100.0 * stats.sparsity());
  std::printf("softmax mass in skipped tiles: mean %.3g per row\n", stats.mass_share);
  std::printf("error against dense: relative L2 %.3g, max abs %.3g\n", std::sqrt(num / den),
              max_abs);
}

void add_demo(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Main job: skip-softmax vs dense attention on real-structure inputs (CPU reference)");
  cmd->add_option("--seq-len", args->seq_len, "Tokens per sequence")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args->batch, "Sequences")->check(CLI::PositiveNumber);
  cmd->add_option("--heads-q", args->heads_q, "Query heads")->check(CLI::PositiveNumber);
  cmd->add_option("--heads-kv", args->heads_kv, "KV heads")->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", args->head_dim, "Head dimension")->check(CLI::PositiveNumber);
  cmd->add_flag("--non-causal", args->non_causal, "Full (non-causal) attention");
  cmd->add_option("--threshold", args->threshold, "Flat lambda in [0, 1)");
  cmd->add_option("--scale-table", args->scale_table, "Scale table JSON [[seqlen_bin, S], ...]");
  cmd->add_option("--tile-q", args->tile_q, "Query rows per tile")->check(CLI::PositiveNumber);
  cmd->add_option("--tile-k", args->tile_k, "Keys per tile")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-order", args->kv_order, "forward, reverse or sink-reverse");
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)");
  cmd->add_option("--seed", args->seed, "Input seed");
  cmd->add_option("--sink", args->shape.sink, "Score of every query against key 0");
  cmd->add_option("--band", args->shape.local, "Score of a query against its own position");
  cmd->add_option("--far-field", args->shape.noise, "Spread of the far-field scores")
      ->check(CLI::PositiveNumber);
  cmd->callback([args] { run_demo(*args); });
}

const Registration reg{10, &add_demo};

}  // namespace
}  // namespace skipsoftmax::cli
