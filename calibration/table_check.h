// Does a calibrated table hold its target on text calibration never saw? The run behind
// `skipsoftmax check-tables`: RULER prompts from the held-out books (CorpusSplit::kEvaluation, a
// seed of their own), captured and voted on exactly as calibration does (calibrate.h: the same
// tiles, visit order, decode steps and splits), and each tile counted as the kernels decide it, at
// lambda = table.lambda_for(L) of its own sequence. Each arm is a table per phase; the tool checks
// the tier's tables against a flat S (the tier's first row at every length), the curve that
// drifts when S depends on the length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibrate.h"
#include "engine_io.h"

namespace skipsoftmax {

struct TableCheckSettings : PromptPass {
  std::vector<std::int64_t> lengths;  // KV lengths checked, increasing (prompts: sample_length())
};

// The tables of one arm, per phase.
using TableArm = PerPhase<ScaleTable>;

// The tiles of a pass and those `table` skips, each sequence at its own lambda (the guard
// included): the decisions of the kernels and of the CPU reference.
TileCount count_skipped(const TileStats& stats, const ScaleTable& table);

struct TableCheckPoint {
  Phase phase = Phase::kPrefill;
  std::int64_t length = 0;
  std::vector<TileCount> arms;  // per arm, pooled over prompts and global layers
};

struct TableCheckResult {
  std::vector<TableCheckPoint> points;  // by phase (prefill first), then length
  LayerPlan layers;
  std::int64_t prompts = 0;
};

// Throws what the corpus, the source or the backend throws.
TableCheckResult run_table_check(const TableCheckSettings& settings, const ModelConfig& model,
                                 RulerCorpus& corpus, CaptureSource& source,
                                 const StatsBackend& backend, const std::vector<TableArm>& arms,
                                 const ProgressFn& progress);

// The verdict on arm 0 of one phase: every length where its table skips (lambda > 0 at the
// length) lies within `tolerance` of `target`. Lengths the guard runs dense are not judged; a
// table that skips at no length checked fails.
struct HoldVerdict {
  bool pass = true;
  int judged = 0;  // lengths where the table skips
  double lowest = 0.0, highest = 0.0;
  std::vector<std::int64_t> outside;  // lengths out of tolerance
};
HoldVerdict hold_verdict(const TableCheckResult& result, Phase phase, const ScaleTable& table,
                         double target, double tolerance);

}  // namespace skipsoftmax
