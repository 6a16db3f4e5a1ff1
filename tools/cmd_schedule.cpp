// skipsoftmax schedule: the timesteps of a flow-shifted rectified-flow schedule and, per cutoff D
// (disabled_until_timestep), how many denoising steps run dense and how many skip-softmax.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "skipsoftmax/schedule.h"

namespace skipsoftmax::cli {
namespace {

struct ScheduleOptions {
  double shift = 0.0;
  int steps = 0;
  std::vector<double> cutoffs;
  int show = 10;
  bool json = false;
};

void print_json(const ScheduleOptions& o, const std::vector<double>& shown,
                const std::vector<StepSplit>& splits) {
  nlohmann::json j = {{"shift", o.shift}, {"steps", o.steps}, {"timesteps", shown}};
  j["cutoffs"] = nlohmann::json::array();
  for (std::size_t i = 0; i < splits.size(); ++i) {
    j["cutoffs"].push_back({{"disabled_until_timestep", o.cutoffs[i]},
                            {"dense_steps", splits[i].dense_steps},
                            {"skip_steps", splits[i].skip_steps}});
  }
  std::cout << j.dump(2) << '\n';
}

void print_text(const ScheduleOptions& o, const std::vector<double>& shown,
                const std::vector<StepSplit>& splits) {
  std::cout << "flow-shifted schedule t = s*u / (1 + (s-1)*u), shift s=" << o.shift << ", "
            << o.steps << " denoiser steps\n"
            << "step  t\n"
            << std::fixed << std::setprecision(6);
  for (std::size_t i = 0; i < shown.size(); ++i) {
    std::cout << std::setw(4) << i << "  " << shown[i] << '\n';
  }
  if (shown.size() < static_cast<std::size_t>(o.steps)) {
    std::cout << "   ... " << o.steps - static_cast<int>(shown.size())
              << " more (--show K lists K)\n";
  }
  std::cout << std::defaultfloat << "cutoff D  dense steps  skip-softmax steps\n";
  for (std::size_t i = 0; i < splits.size(); ++i) {
    std::cout << std::left << std::setw(8) << o.cutoffs[i] << "  " << std::setw(11)
              << splits[i].dense_steps << "  " << splits[i].skip_steps << '\n';
  }
}

void run_schedule(const ScheduleOptions& o) {
  const std::vector<double> t = flow_shifted_timesteps(o.shift, o.steps);
  std::vector<StepSplit> splits;
  for (double cutoff : o.cutoffs) splits.push_back(split_steps(t, cutoff));
  const std::size_t shown = std::min(t.size(), static_cast<std::size_t>(o.show));
  const std::vector<double> first(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(shown));
  if (o.json) {
    print_json(o, first, splits);
  } else {
    print_text(o, first, splits);
  }
}

void add_schedule(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App* sub = app.add_subcommand(
      "schedule", "Timesteps of a flow-shifted schedule and the dense steps each cutoff D keeps");
  sub->add_option("--shift", o->shift, "Flow shift s > 0")->required();
  sub->add_option("--steps", o->steps, "Denoiser forwards N >= 1")->required();
  sub->add_option("--cutoff", o->cutoffs, "disabled_until_timestep D in [0, 1]; repeatable")
      ->required();
  sub->add_option("--show", o->show, "How many timesteps to print (default 10)")
      ->check(kNonNegative);
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] { run_schedule(*o); });
}

const Registration reg{50, &add_schedule};

}  // namespace
}  // namespace skipsoftmax::cli
