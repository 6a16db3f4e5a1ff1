// skipsoftmax check-tables --model-dir DIR --lengths L...: do a calibrated checkpoint's tables
// hold their target sparsity on prompts calibration never saw (calibration/table_check.h)? Per
// phase and length, the tile sparsity of the tier's tables and of a flat S (the tier's first row at
// every length); PASS when every length where the tables skip lies within --tolerance of the tier's
// target, else exit code 2 (1: bad input). --save-results writes the numbers as JSON.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibration_setup.h"
#include "commands.h"
#include "file_io.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"
#include "table_check.h"
#include "table_json.h"

#ifdef SKIPSOFTMAX_HAVE_CUDA
#include "skipsoftmax_git_revision.h"
#endif

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct CheckArgs {
  std::string model_dir;
  std::string phase = "both";
  std::vector<std::int64_t> lengths;
  std::string tier;  // empty: each phase's deployed target
  int samples = 4;
  std::uint64_t seed = 1;
  double tolerance = 0.02;
  PassFlags pass;
  std::string save_results;
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// The tier a phase is checked at: --tier, else the checkpoint's deployed target.
const Tier& checked_tier(const CheckpointConfig& ck, Phase phase, const std::string& tier_flag) {
  const CheckpointPhase& cp = ck.phases[phase];
  const char* name = to_string(phase);
  double sparsity = 0.0;
  if (!tier_flag.empty()) {
    try {
      sparsity = parse_target_sparsity(tier_flag);
    } catch (const std::invalid_argument& e) {
      fail(std::string("--tier: ") + e.what());
    }
  } else if (cp.target_sparsity) {
    sparsity = *cp.target_sparsity;
  } else {
    fail(std::string("the checkpoint records no ") + name +
         " target sparsity: name the tier to check with --tier (calibrated: " + cp.tier_list() +
         ")");
  }
  const Tier* tier = cp.find_tier(sparsity);
  if (tier == nullptr) {
    fail(std::string("the checkpoint has no ") + name + " tier " + format_percent(sparsity) +
         " (calibrated: " + cp.tier_list() + "); run skipsoftmax calibrate first");
  }
  if (tier->table.empty()) {
    fail(std::string(name) + " tier " + tier->key + " is an empty table: nothing to check");
  }
  return *tier;
}

void check_flags(const CheckArgs& a) {
  if (a.lengths.empty()) fail("--lengths: give at least one length");
  for (std::size_t i = 0; i < a.lengths.size(); ++i) {
    if (a.lengths[i] < 1) fail("--lengths must be positive, got " + std::to_string(a.lengths[i]));
    if (i > 0 && a.lengths[i] <= a.lengths[i - 1]) {
      fail("--lengths must increase, got " + std::to_string(a.lengths[i - 1]) + " then " +
           std::to_string(a.lengths[i]));
    }
  }
  if (a.samples < 1) fail("--samples must be >= 1, got " + std::to_string(a.samples));
  if (!(a.tolerance > 0.0 && a.tolerance < 1.0)) {
    fail("--tolerance must lie in (0, 1), got " + std::to_string(a.tolerance));
  }
  check_pass_flags(a.pass);
  if (a.pass.decode_steps > a.lengths.front()) {
    fail("--decode-steps " + std::to_string(a.pass.decode_steps) + " exceeds the shortest length " +
         std::to_string(a.lengths.front()));
  }
  if (!a.save_results.empty()) check_output_file(a.save_results);
}

void run_check(const CheckArgs& a) {
  check_flags(a);
  const fs::path model_dir(a.model_dir);
  const fs::path gguf_path = find_gguf(model_dir);
  if (!a.save_results.empty()) {
    check_not_an_input(a.save_results, "--save-results",
                       {{"--model-dir", model_dir, true}, {"the checkpoint's weights", gguf_path}});
  }
  const CheckpointConfig ck = load_checkpoint_config(model_dir);
  TableCheckSettings s;
  s.phases = parse_phases(a.phase);
  s.lengths = a.lengths;
  s.samples = a.samples;
  s.seed = a.seed;
  s.decode_steps = a.pass.decode_steps;
  s.decode_splits = a.pass.decode_splits;
  s.num_threads = a.pass.threads;
  // Arm 0: the tier's tables; arm 1: a flat S, the tier's first row at every length.
  PerPhase<const Tier*> tiers{};
  TableArm tables, flat;
  for (Phase p : voted_phases(s)) {
    tiers[p] = &checked_tier(ck, p, a.tier);
    tables[p] = tiers[p]->table;
    flat[p] = ScaleTable({tables[p].rows().front()});
  }

  const gguf::File file = gguf::File::open(gguf_path);
  const ModelConfig model = read_model_config(file);
  const std::int64_t longest = sample_length(s, s.lengths.back());
  if (longest > model.context_length) {
    fail("--lengths " + std::to_string(s.lengths.back()) + " needs prompts of " +
         std::to_string(longest) + " tokens, more than the model's context length " +
         std::to_string(model.context_length));
  }
  s.prefill_tiles = prefill_vote_tiles(model.head_dim, KvOrder::kSinkThenReverse);
  s.decode_tile_k = decode_tile_k(model.head_dim);
  const StatsBackend backend = stats_backend(a.pass);
  RulerCorpus corpus(corpus_dir(a.pass), CorpusSplit::kEvaluation, model_tokenizer(file));
  const std::unique_ptr<CaptureSource> source =
      capture_source(file, model, gguf_path, a.pass, !a.pass.captures_dir.empty());

  std::cerr << "skipsoftmax check-tables: " << model.architecture << ", " << s.lengths.size()
            << " lengths x " << s.samples << " prompts from the held-out books (seed " << s.seed
            << "), backend " << backend.name << '\n';
  const TableCheckResult r = run_table_check(
      s, model, corpus, *source, backend, {tables, flat},
      [](const std::string& line) { std::cerr << "skipsoftmax check-tables: " << line << '\n'; });

  nlohmann::ordered_json out = {{"format", "skipsoftmax-table-check/1"},
                                {"provenance",
                                 {{"command", command_line()},
#ifdef SKIPSOFTMAX_GIT_REVISION
                                  {"git_revision", SKIPSOFTMAX_GIT_REVISION},
#endif
                                  {"backend", backend.name}}},
                                {"model", model.architecture},
                                {"corpus_split", to_string(CorpusSplit::kEvaluation)},
                                {"seed", s.seed},
                                {"samples", s.samples},
                                {"decode_steps", s.decode_steps},
                                {"decode_splits", s.decode_splits},
                                {"global_layers", r.layers.pooled.size()},
                                {"tolerance", a.tolerance},
                                {"phases", nlohmann::ordered_json::object()}};
  bool pass = true;
  std::ostringstream text;
  text << std::left;
  for (Phase p : voted_phases(s)) {
    const Tier& tier = *tiers[p];
    const double target = tier.sparsity;
    const HoldVerdict v = hold_verdict(r, p, tables[p], target, a.tolerance);
    pass = pass && v.pass;
    nlohmann::ordered_json points = nlohmann::ordered_json::array();
    text << '\n'
         << to_string(p) << ", tier " << tier.key << " (target " << percent_text(target) << " +- "
         << a.tolerance * 100.0 << " points)\n"
         << std::setw(9) << "length" << std::setw(10) << "tables" << std::setw(10) << "flat S"
         << "tiles\n";
    for (const TableCheckPoint& pt : r.points) {
      if (pt.phase != p) continue;
      nlohmann::ordered_json j = {{"length", pt.length}, {"tiles", pt.arms[0].visited}};
      text << std::setw(9) << pt.length;
      for (std::size_t arm = 0; arm < 2; ++arm) {
        const ScaleTable& t = arm == 0 ? tables[p] : flat[p];
        const bool dense = t.lambda_for(pt.length) == 0.0;
        const char* key = arm == 0 ? "tables" : "flat";
        j[key] = dense ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json(pt.arms[arm].sparsity());
        text << std::setw(10)
             << (dense ? std::string("dense") : percent_text(pt.arms[arm].sparsity()));
      }
      text << pt.arms[0].visited << '\n';
      points.push_back(std::move(j));
    }
    text << to_string(p) << ": ";
    if (v.judged == 0) {
      text << "the tables skip at no length checked: FAIL\n";
    } else {
      text << "the tables hold " << percent_text(v.lowest) << "-" << percent_text(v.highest)
           << " at the " << v.judged << " lengths where they skip: " << (v.pass ? "PASS" : "FAIL");
      if (!v.pass) {
        text << " (outside at";
        for (std::int64_t l : v.outside) text << ' ' << l;
        text << ')';
      }
      text << '\n';
    }
    out["phases"][to_string(p)] = {{"tier", tier.key},
                                   {"target", target},
                                   {"table", scale_table_to_json(tables[p])},
                                   {"flat_table", scale_table_to_json(flat[p])},
                                   {"points", points},
                                   {"pass", v.pass}};
  }
  out["pass"] = pass;
  if (!a.save_results.empty()) write_json_file(a.save_results, out);
  std::cout << "checked " << r.prompts << " held-out prompts on " << r.layers.pooled.size()
            << " global layers\n"
            << text.str();
  if (!pass) throw CommandFailed("the tables do not hold their target: FAIL", 2);
  std::cout << "PASS\n";
}

void add_check_tables(CLI::App& app) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* sub = app.add_subcommand(
      "check-tables",
      "Measure the tile sparsity a calibrated checkpoint's tables reach on held-out RULER prompts "
      "at each length, against a flat S; exit 2 when they miss their target");
  sub->add_option("--model-dir", a->model_dir, "Calibrated checkpoint: one .gguf, config.json")
      ->required();
  sub->add_option("--lengths", a->lengths, "KV lengths to check, increasing")->required();
  sub->add_option("--phase", a->phase, "prefill, decode or both")->capture_default_str();
  sub->add_option("--tier", a->tier,
                  "Tier to check (0.75 or 75%); default: each phase's deployed target");
  sub->add_option("--samples", a->samples, "Prompts per length")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the prompts")
      ->check(kNonNegative)
      ->capture_default_str();
  sub->add_option("--tolerance", a->tolerance,
                  "Largest distance from the target, as a fraction (0.02: 2 points)")
      ->capture_default_str();
  add_pass_flags(*sub, a->pass);
  sub->add_option("--save-results", a->save_results, "Write the measurements as JSON here");
  sub->callback([a] { run_check(*a); });
}

const Registration reg{26, &add_check_tables};

}  // namespace
}  // namespace skipsoftmax::cli
