// Flow-shifted rectified-flow schedules, and how many denoising steps a timestep gate keeps dense.
//
// A sampler with N denoiser forwards walks N + 1 uniform points u_i = (N - i) / N, i = 0..N, from 1
// to 0, and shifts each: t = s * u / (1 + (s - 1) * u). Forward i (i = 0..N-1) runs at t_i; t_N = 0
// only ends sampling. Worked example, s = 3, N = 4: u = 1, .75, .5, .25 -> t = 1, 0.9, 0.75, 0.5.
//
// The gate disabled_until_timestep = D keeps a step dense while its t > D; D = 0 is the sentinel
// for "no gate": every step may skip and t is never read.
#pragma once

#include <vector>

namespace skipsoftmax {

// t = s * u / (1 + (s - 1) * u), for u in [0, 1] and s > 0: within [0, 1] for any such s.
double flow_shift(double u, double shift);

// Denoiser forwards a schedule may have (samplers run tens to a few hundred).
inline constexpr int kMaxScheduleSteps = 1000000;

// t_0 .. t_{N-1}, the timestep of each denoiser forward. Throws std::invalid_argument unless
// shift is finite and > 0 and steps lies in [1, kMaxScheduleSteps].
std::vector<double> flow_shifted_timesteps(double shift, int steps);

// Throws std::invalid_argument unless D lies in [0, 1].
void validate_cutoff(double disabled_until_timestep);

// The gate rule: a step at timestep t runs dense iff D > 0 and t > D.
bool dense_at_timestep(double t, double disabled_until_timestep);

struct StepSplit {
  int dense_steps = 0;
  int skip_steps = 0;  // steps that run skip-softmax
};

// Applies the gate rule to every step. Throws std::invalid_argument for D outside [0, 1].
StepSplit split_steps(const std::vector<double>& step_timesteps, double disabled_until_timestep);

}  // namespace skipsoftmax
