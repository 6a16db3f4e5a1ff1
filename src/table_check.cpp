#include "table_check.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace skipsoftmax {

std::int64_t check_prompt_length(const TableCheckSettings& s, std::int64_t length) {
  return length + (s.phases.decode ? s.decode_steps - 1 : 0);
}

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
  std::vector<Phase> phases;
  for (Phase p : kPhases) {
    if (s.phases[p]) phases.push_back(p);
  }
  if (phases.empty()) throw std::invalid_argument("no phase to check");
  for (Phase p : phases) {
    for (std::int64_t length : s.lengths) {
      result.points.push_back({p, length, std::vector<TileCount>(arms.size())});
    }
  }
  const PerPhase<StatsOptions> options =
      stats_options(s.prefill_tiles, s.decode_tile_k, s.decode_splits, s.num_threads);

  const auto work_of = [&](std::int64_t length) {
    const double n = static_cast<double>(check_prompt_length(s, length));
    return n * n * static_cast<double>(layers.pooled.size());
  };
  double total = 0.0;
  for (std::int64_t length : s.lengths) total += work_of(length) * s.samples;
  ProgressMeter meter(progress, total);

  for (std::size_t li = 0; li < s.lengths.size(); ++li) {
    const std::int64_t length = s.lengths[li];
    const std::int64_t n = check_prompt_length(s, length);
    for (int i = 0; i < s.samples; ++i) {
      const RulerSample sample = corpus.make_sample(n, s.seed, i);
      const std::string where = "length " + std::to_string(length) + " (" + std::to_string(li + 1) +
                                "/" + std::to_string(s.lengths.size()) + "), prompt " +
                                std::to_string(i + 1) + "/" + std::to_string(s.samples);
      std::size_t done = 0;
      source.capture(sample.tokens, layers.pooled, [&](LayerCapture&& c) {
        for (std::size_t pi = 0; pi < phases.size(); ++pi) {
          const TileStats stats = capture_tile_stats(phases[pi], c, model, n, s.decode_steps,
                                                     backend, options[phases[pi]]);
          TableCheckPoint& point = result.points[pi * s.lengths.size() + li];
          for (std::size_t a = 0; a < arms.size(); ++a) {
            const TileCount t = count_skipped(stats, arms[a].tables[phases[pi]]);
            point.arms[a].visited += t.visited;
            point.arms[a].skipped += t.skipped;
          }
        }
        ++done;
        meter.advance(work_of(length) / static_cast<double>(layers.pooled.size()));
        meter.report(
            where + ": layer " + std::to_string(done) + "/" + std::to_string(layers.pooled.size()),
            done == layers.pooled.size());
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
