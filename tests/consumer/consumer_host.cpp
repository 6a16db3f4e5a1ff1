// The host library through the installed package: a scale table and the dispatch rule, a
// checkpoint config, and the float64 reference decode against a softmax written out here.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "check.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/reference.h"
#include "skipsoftmax/threshold.h"

int main() {
  using namespace skipsoftmax;

  const Threshold table = Threshold::table(ScaleTable({{4096, 8.0}, {8192, 12.0}}));
  check(table.lambda_for(4095) == 0.0, "the guard below the first bin");
  check(table.lambda_for(6144) == 8.0 / 6144, "lambda = S / L");
  check(choose_decode_kernel(table, 4000, 8) == KernelChoice::kDense, "dense below the first bin");
  check(choose_decode_kernel(table, 5000, 8) == KernelChoice::kSkip, "skip from the first bin");
  bool refused = false;
  try {
    ScaleTable({{8192, 8.0}, {4096, 12.0}});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  check(refused, "a table with decreasing bins is refused");

  const CheckpointConfig config = parse_checkpoint_config(
      R"({"model_type": "llama", "skip_softmax_decode_scale_table": [[4096, 8.0], [8192, 12.0]]})",
      "config.json");
  check(config.phases[Phase::kDecode].scale_table == table.scale_table(),
        "the decode table read from a checkpoint config");

  // One sequence of 40 cached tokens in pages of 16 at shuffled slots; 2 query heads share one KV
  // head of dim 8. Key 0 (the sink) scores 20 above the others for both heads.
  const int dim = 8, heads = 2, seq_len = 40, page = 16;
  const std::vector<int> slots = {2, 0, 1};  // page table: token t lives in page slots[t / 16]
  std::vector<float> q(heads * dim), k(3 * page * dim), v(3 * page * dim);
  for (int h = 0; h < heads; ++h) q[h * dim] = 4.0f * std::sqrt(8.0f);
  auto key_row = [&](int t) { return (slots[t / page] * page + t % page) * dim; };
  for (int t = 0; t < seq_len; ++t) {
    k[key_row(t)] = t == 0 ? 5.0f : 0.01f * static_cast<float>(t % 7);
    for (int d = 0; d < dim; ++d) v[key_row(t) + d] = static_cast<float>((t * 3 + d) % 11) - 5.0f;
  }
  DecodeProblem p;
  p.q = q.data();
  p.kv = {.k_pages = k.data(),
          .v_pages = v.data(),
          .num_pages = 3,
          .page_size = page,
          .page_table = {2, 0, 1},
          .max_pages_per_seq = 3,
          .seq_lens = {seq_len}};
  p.num_heads_q = heads;
  p.num_heads_kv = 1;
  p.head_dim = dim;

  // Expected: softmax(q k / sqrt(dim)) v, written out.
  std::vector<double> expected(heads * dim, 0.0);
  for (int h = 0; h < heads; ++h) {
    std::vector<double> score(seq_len);
    double top = -INFINITY, sum = 0.0;
    for (int t = 0; t < seq_len; ++t) {
      for (int d = 0; d < dim; ++d) score[t] += double{q[h * dim + d]} * k[key_row(t) + d];
      score[t] /= std::sqrt(double{dim});
      top = std::max(top, score[t]);
    }
    for (int t = 0; t < seq_len; ++t) sum += std::exp(score[t] - top);
    for (int t = 0; t < seq_len; ++t)
      for (int d = 0; d < dim; ++d)
        expected[h * dim + d] += std::exp(score[t] - top) / sum * v[key_row(t) + d];
  }

  ReferenceOptions dense;
  dense.tiles.tile_k = page;
  std::vector<double> out(heads * dim);
  const AttentionStats dense_stats = reference_decode(p, dense, out.data());
  double worst = 0.0;
  for (int i = 0; i < heads * dim; ++i) worst = std::max(worst, std::abs(out[i] - expected[i]));
  check(worst < 1e-12, "dense reference decode equals the softmax written out");
  check(dense_stats.tiles_total == 3 && dense_stats.tiles_skipped == 0, "dense visits 3 tiles");

  // At lambda 1e-3 the two tiles after the sink lie ~20 below the running maximum: skipped.
  ReferenceOptions skip = dense;
  skip.threshold = Threshold::flat(1e-3);
  const AttentionStats skip_stats = reference_decode(p, skip, out.data());
  check(skip_stats.tiles_skipped == 2, "the two far tiles are skipped");
  check(skip_stats.mass_share < 1e-3, "the skipped tiles hold under lambda of the mass");

  std::printf("consumer_host: %s (dense error %.2e, %lld of %lld tiles skipped at lambda 1e-3)\n",
              consumer_failures ? "FAILED" : "ok", worst,
              static_cast<long long>(skip_stats.tiles_skipped),
              static_cast<long long>(skip_stats.tiles_total));
  return consumer_failures ? 1 : 0;
}
