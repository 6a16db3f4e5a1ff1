// Flow-shifted schedules and the timestep gate's step counts, against hand-computed values.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "skipsoftmax/schedule.h"

namespace skipsoftmax {
namespace {

TEST(Schedule, FlowShiftEndpointsAndIdentity) {
  EXPECT_DOUBLE_EQ(flow_shift(1.0, 7.0), 1.0);
  EXPECT_DOUBLE_EQ(flow_shift(0.0, 7.0), 0.0);
  EXPECT_DOUBLE_EQ(flow_shift(0.3, 1.0), 0.3);  // s = 1: no shift
  // s = 3, u = 0.5: 1.5 / 2 = 0.75.
  EXPECT_DOUBLE_EQ(flow_shift(0.5, 3.0), 0.75);
}

TEST(Schedule, ShiftThreeFourSteps) {
  // u = 1, .75, .5, .25 -> t = 3u / (1 + 2u) = 1, 2.25/2.5, 1.5/2, .75/1.5.
  const std::vector<double> t = flow_shifted_timesteps(3.0, 4);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0], 1.0);
  EXPECT_DOUBLE_EQ(t[1], 0.9);
  EXPECT_DOUBLE_EQ(t[2], 0.75);
  EXPECT_DOUBLE_EQ(t[3], 0.5);
}

TEST(Schedule, ShiftBelowOneSpendsStepsAtLowT) {
  // s = 0.5, N = 2: u = 1, .5 -> t = 1, 0.25 / 0.75.
  const std::vector<double> t = flow_shifted_timesteps(0.5, 2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0], 1.0);
  EXPECT_DOUBLE_EQ(t[1], 1.0 / 3.0);
}

TEST(Schedule, TinyShiftStaysInTheUnitInterval) {
  // 1 + (s - 1) u rounds to 0 at u = 1 for s = 1e-320; the timestep is still 1.
  const std::vector<double> t = flow_shifted_timesteps(1e-320, 10);
  EXPECT_EQ(t.front(), 1.0);
  for (double x : t) EXPECT_TRUE(x >= 0.0 && x <= 1.0) << x;
}

TEST(Schedule, OneStep) { EXPECT_EQ(flow_shifted_timesteps(5.0, 1), std::vector<double>{1.0}); }

TEST(Schedule, RejectsBadShiftAndSteps) {
  for (double s : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(flow_shifted_timesteps(s, 4), std::invalid_argument) << s;
  }
  EXPECT_THROW(flow_shifted_timesteps(3.0, 0), std::invalid_argument);
  EXPECT_THROW(flow_shifted_timesteps(3.0, kMaxScheduleSteps + 1), std::invalid_argument);
  EXPECT_THROW(flow_shifted_timesteps(3.0, -2), std::invalid_argument);
}

TEST(Gate, DenseWhileTAboveCutoff) {
  EXPECT_TRUE(dense_at_timestep(0.9, 0.8));
  EXPECT_FALSE(dense_at_timestep(0.8, 0.8));  // t = D already skips
  EXPECT_FALSE(dense_at_timestep(0.7, 0.8));
}

TEST(Gate, ZeroIsTheNoGateSentinel) {
  EXPECT_FALSE(dense_at_timestep(1.0, 0.0));
  EXPECT_FALSE(dense_at_timestep(0.5, 0.0));
}

TEST(Gate, SplitShiftThreeFourSteps) {
  const std::vector<double> t = flow_shifted_timesteps(3.0, 4);  // 1, 0.9, 0.75, 0.5
  const auto split = [&](double d) {
    const StepSplit s = split_steps(t, d);
    return std::pair{s.dense_steps, s.skip_steps};
  };
  EXPECT_EQ(split(0.0), std::pair(0, 4));
  EXPECT_EQ(split(0.95), std::pair(1, 3));
  EXPECT_EQ(split(0.8), std::pair(2, 2));
  EXPECT_EQ(split(0.75), std::pair(2, 2));  // t = 0.75 is not above D
  EXPECT_EQ(split(0.6), std::pair(3, 1));
  EXPECT_EQ(split(0.1), std::pair(4, 0));
  EXPECT_EQ(split(1.0), std::pair(0, 4));
}

TEST(Gate, SplitShiftTwelveFortyNineSteps) {
  // A 50-point schedule (49 forwards) with video shift 12 stays above t = 0.9 for 28 steps.
  // Dense counts per D, from t_i = 12 u / (1 + 11 u), u = 1 - i/49.
  const std::vector<double> t = flow_shifted_timesteps(12.0, 49);
  const std::pair<double, int> expected[] = {{1.0, 0},   {0.99, 6},  {0.97, 14},
                                             {0.95, 19}, {0.90, 28}, {0.86, 33}};
  for (const auto& [d, dense] : expected) {
    const StepSplit s = split_steps(t, d);
    EXPECT_EQ(s.dense_steps, dense) << "D=" << d;
    EXPECT_EQ(s.skip_steps, 49 - dense) << "D=" << d;
  }
}

TEST(Gate, RejectsCutoffOutsideUnitInterval) {
  const std::vector<double> t = {1.0};
  for (double d : {-0.1, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(split_steps(t, d), std::invalid_argument) << d;
    EXPECT_THROW(validate_cutoff(d), std::invalid_argument) << d;
  }
  EXPECT_NO_THROW(validate_cutoff(0.0));
  EXPECT_NO_THROW(validate_cutoff(1.0));
}

}  // namespace
}  // namespace skipsoftmax
