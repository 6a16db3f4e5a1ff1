// skipsoftmax inspect DIR: what each phase will run for a checkpoint (what a flagless export
// deploys, the tiers available, the shape advice) or for an engine (what its config holds).
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "skipsoftmax/config.h"
#include "table_json.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct InspectOptions {
  std::string dir;
  bool json = false;
};

// What inspect reports; `checkpoint` is set for a checkpoint directory only.
struct View {
  fs::path dir;
  std::optional<fs::path> checkpoint_dir;  // engine only
  std::optional<WeightsRef> weights;       // engine only, when it has weights
  std::optional<CheckpointConfig> checkpoint;
  PerPhase<ResolvedPhase> phases;
  std::vector<std::string> notes;
};

View inspect(const fs::path& dir) {
  const bool is_engine = is_engine_dir(dir);  // first: it names a missing directory clearly
  View v;
  v.dir = fs::canonical(dir);
  if (is_engine) {
    EngineConfig engine = load_engine_config(dir);
    v.checkpoint_dir = engine.checkpoint_dir;
    v.phases = engine.phases;
    v.weights = engine.weights;
    v.notes = table_cautions(v.phases);
    return v;
  }
  v.checkpoint = load_checkpoint_config(dir);
  ExportPlan plan = plan_export(*v.checkpoint, {});
  v.phases = plan.phases;
  v.notes = plan.notes;
  for (std::string& caution : table_cautions(plan.phases)) v.notes.push_back(std::move(caution));
  return v;
}

// Shortest round-trip form, as in the config files.
std::string number_text(double x) { return json(x).dump(); }

std::string length_text(std::int64_t length) {
  return length == kNeverSkippable ? "never" : std::to_string(length);
}

json length_json(std::int64_t length) {
  return length == kNeverSkippable ? json(nullptr) : json(length);
}

json phase_json(const ResolvedPhase& r, const CheckpointPhase* checkpoint) {
  const Threshold& t = r.threshold;
  json j = {{"runs", t.never_skips() ? "dense" : "skip"},
            {"source", r.source},
            {"first_skippable_length", length_json(t.first_skippable_length())}};
  if (t.kind() == Threshold::Kind::kTable) j["scale_table"] = scale_table_to_json(t.scale_table());
  if (t.kind() == Threshold::Kind::kFlat) j["threshold"] = t.flat_lambda();
  if (!checkpoint) return j;
  j["tiers"] = json::array();
  for (const Tier& tier : checkpoint->tiers) {
    j["tiers"].push_back(
        {{"tier", tier.key},
         {"target_sparsity", tier.sparsity},
         {"first_skippable_length", length_json(tier.table.first_skippable_length())},
         {"scale_table", scale_table_to_json(tier.table)}});
  }
  return j;
}

void print_json(const View& v) {
  json j = {{"kind", v.checkpoint ? "checkpoint" : "engine"}, {"dir", v.dir.string()}};
  if (v.checkpoint_dir) {
    j["checkpoint_dir"] = v.checkpoint_dir->string();
    j["weights"] = nullptr;
    if (v.weights) {
      j["weights"] = {{"file", v.weights->file.string()},
                      {"bytes", v.weights->bytes},
                      {"sha256", v.weights->sha256},
                      {"architecture", json::parse(v.weights->architecture_json)}};
    }
  }
  for (Phase phase : kPhases) {
    j[to_string(phase)] =
        phase_json(v.phases[phase], v.checkpoint ? &v.checkpoint->phases[phase] : nullptr);
  }
  if (v.checkpoint && v.checkpoint->shape_advice_json) {
    j["shape_advice"] = json::parse(*v.checkpoint->shape_advice_json);
  }
  if (v.checkpoint && v.checkpoint->decode_shape_advice_json) {
    j["decode_shape_advice"] = json::parse(*v.checkpoint->decode_shape_advice_json);
  }
  j["notes"] = v.notes;
  std::cout << j.dump(2) << '\n';
}

void print_tiers(const CheckpointPhase& checkpoint) {
  std::cout << "  tiers available:";
  if (checkpoint.tiers.empty()) std::cout << " none";
  for (std::size_t i = 0; i < checkpoint.tiers.size(); ++i) {
    const Tier& tier = checkpoint.tiers[i];
    std::cout << (i ? ", " : " ") << tier.key << " (first skippable length "
              << length_text(tier.table.first_skippable_length()) << ")";
  }
  std::cout << '\n';
}

void print_phase(Phase phase, const ResolvedPhase& r, const CheckpointPhase* checkpoint) {
  const Threshold& t = r.threshold;
  std::cout << to_string(phase) << ": " << (t.never_skips() ? "dense" : "skip") << '\n'
            << "  source: " << r.source << '\n'
            << "  first skippable length: " << length_text(t.first_skippable_length()) << '\n';
  if (t.kind() == Threshold::Kind::kFlat) {
    std::cout << "  flat lambda: " << number_text(t.flat_lambda()) << '\n';
  }
  if (t.kind() == Threshold::Kind::kTable) {
    std::cout << "  table (seqlen_bin, S):\n";
    for (const ScaleTableRow& row : t.scale_table().rows()) {
      std::cout << "    " << row.seqlen_bin << ", " << number_text(row.scale) << '\n';
    }
  }
  if (checkpoint) print_tiers(*checkpoint);
}

void print_text(const View& v) {
  if (v.checkpoint) {
    std::cout << "checkpoint " << v.dir.string() << " (what export without flags deploys)\n";
  } else {
    std::cout << "engine " << v.dir.string() << " (exported from " << v.checkpoint_dir->string()
              << ")\n";
    if (v.weights) {
      std::cout << "weights: " << v.weights->file.string() << " ("
                << json::parse(v.weights->architecture_json).value("name", "?") << ", "
                << v.weights->bytes << " bytes)\n";
    } else {
      std::cout << "weights: none (exported with --config-only)\n";
    }
  }
  for (Phase phase : kPhases) {
    print_phase(phase, v.phases[phase], v.checkpoint ? &v.checkpoint->phases[phase] : nullptr);
  }
  if (v.checkpoint && v.checkpoint->shape_advice_json) {
    std::cout << "shape advice: " << *v.checkpoint->shape_advice_json << '\n';
  }
  if (v.checkpoint && v.checkpoint->decode_shape_advice_json) {
    std::cout << "decode shape advice: " << *v.checkpoint->decode_shape_advice_json << '\n';
  }
  for (const std::string& note : v.notes) std::cout << "note: " << note << '\n';
}

void add_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Show what each phase of a checkpoint or engine directory will run, and why");
  sub->add_option("DIR", o->dir, "Checkpoint or engine directory")->required();
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] {
    const View v = inspect(o->dir);
    if (o->json) {
      print_json(v);
    } else {
      print_text(v);
    }
  });
}

const Registration reg{40, &add_inspect};

}  // namespace
}  // namespace skipsoftmax::cli
