#include "table_check.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace skipsoftmax {

TileCount count_skipped(const TileStats& stats, const ScaleTable& table) {
  TileCount count;
  for (const StatsItem& it : stats.items) {
    const double lambda = table.lambda_for(stats.kv_len[static_cast<std::size_t>(it.seq)]);
    for (std::int64_t t = it.offset; t < it.offset + it.tile_count; ++t) {
      ++count.visited;
      count.skipped += skipped_at(stats.log_crit[static_cast<std::size_t>(t)], lambda);
    }
  }
  return count;
}

TableCheckResult run_table_check(const TableCheckSettings& s, const ModelConfig& model,
                                 RulerCorpus& corpus, CaptureSource& source,
                                 const StatsBackend& backend, const std::vector<TableArm>& arms,
                                 const ProgressFn& progress) {
  TableCheckResult result;
  result.layers = layer_plan(model);
  const LayerPlan& layers = result.layers;
  if (layers.pooled.empty()) {
    throw std::runtime_error("every layer of the model is a sliding-window layer: nothing skips");
  }
  if (arms.empty()) throw std::invalid_argument("no tables to check");
  const std::vector<Phase> phases = voted_phases(s);
  for (Phase p : phases) {
    for (std::int64_t length : s.lengths) {
      result.points.push_back({p, length, std::vector<TileCount>(arms.size())});
    }
  }
  double total = 0.0;
  for (std::int64_t length : s.lengths)
    total += prompt_work(sample_length(s, length), layers) * s.samples;
  ProgressMeter meter(progress, total);

  for (std::size_t li = 0; li < s.lengths.size(); ++li) {
    const std::int64_t length = s.lengths[li];
    for (int i = 0; i < s.samples; ++i) {
      const RulerSample sample = corpus.make_sample(sample_length(s, length), s.seed, i);
      const std::string where = "length " + std::to_string(length) + " (" + std::to_string(li + 1) +
                                "/" + std::to_string(s.lengths.size()) + "), prompt " +
                                std::to_string(i + 1) + "/" + std::to_string(s.samples);
      prompt_tile_stats(s, model, source, backend, layers, sample.tokens, phases, meter, where,
                        [&](std::size_t pi, TileStats&& stats) {
                          TableCheckPoint& point = result.points[pi * s.lengths.size() + li];
                          for (std::size_t a = 0; a < arms.size(); ++a) {
                            const TileCount t = count_skipped(stats, arms[a][phases[pi]]);
                            point.arms[a].visited += t.visited;
                            point.arms[a].skipped += t.skipped;
                          }
                        });
      ++result.prompts;
    }
  }
  return result;
}

HoldVerdict hold_verdict(const TableCheckResult& result, Phase phase, const ScaleTable& table,
                         double target, double tolerance) {
  HoldVerdict v;
  for (const TableCheckPoint& p : result.points) {
    if (p.phase != phase || p.arms.empty() || table.lambda_for(p.length) == 0.0) continue;
    const double s = p.arms[0].sparsity();
    v.lowest = v.judged == 0 ? s : std::min(v.lowest, s);
    v.highest = v.judged == 0 ? s : std::max(v.highest, s);
    ++v.judged;
    if (std::abs(s - target) > tolerance) v.outside.push_back(p.length);
  }
  v.pass = v.judged > 0 && v.outside.empty();
  return v;
}

}  // namespace skipsoftmax
