#include "skipsoftmax/schedule.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace skipsoftmax {

// s u / (1 + (s - 1) u), its denominator written as s u + (1 - u): for a tiny s, 1 + (s - 1) u
// rounds to 0 at u = 1 (an infinite timestep), s u + (1 - u) to s.
double flow_shift(double u, double shift) { return shift * u / (shift * u + (1.0 - u)); }

std::vector<double> flow_shifted_timesteps(double shift, int steps) {
  if (!std::isfinite(shift) || shift <= 0.0) {
    std::ostringstream msg;
    msg << "shift s=" << shift << " must be finite and > 0";
    throw std::invalid_argument(msg.str());
  }
  if (steps < 1 || steps > kMaxScheduleSteps) {
    throw std::invalid_argument("steps N=" + std::to_string(steps) + " must lie in [1, " +
                                std::to_string(kMaxScheduleSteps) + "]");
  }
  std::vector<double> t;
  t.reserve(steps);
  for (int i = 0; i < steps; ++i) {
    t.push_back(flow_shift(static_cast<double>(steps - i) / steps, shift));
  }
  return t;
}

void validate_cutoff(double disabled_until_timestep) {
  const double d = disabled_until_timestep;
  if (!(d >= 0.0 && d <= 1.0)) {
    std::ostringstream msg;
    msg << "disabled_until_timestep D=" << d << " is outside [0, 1]";
    throw std::invalid_argument(msg.str());
  }
}

bool dense_at_timestep(double t, double disabled_until_timestep) {
  return disabled_until_timestep > 0.0 && t > disabled_until_timestep;
}

StepSplit split_steps(const std::vector<double>& step_timesteps, double disabled_until_timestep) {
  validate_cutoff(disabled_until_timestep);
  StepSplit split;
  for (double t : step_timesteps) {
    ++(dense_at_timestep(t, disabled_until_timestep) ? split.dense_steps : split.skip_steps);
  }
  return split;
}

}  // namespace skipsoftmax
