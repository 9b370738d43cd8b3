// The server's step budget (infer/step_budget.h): no cap until both a
// decode step and a prompt token's cost are measured, then the prompt
// tokens that fit the target beside a decode step, following a change of
// cost within a few steps, never below one block. And the serving loop's
// closing lines (ServeLoopStats) from its steps and the budget.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "infer/step_budget.h"

namespace cohort::infer {
namespace {

// A GPU-like step: 8 ms for the decode rows, 30 us a prompt token.
double step_seconds(int64_t prompt_tokens, double token_s = 30e-6) { return 0.008 + token_s * prompt_tokens; }

TEST(StepBudget, UncappedUntilBothCostsAreMeasuredOrWithoutATarget) {
  StepBudget b(0.025);
  EXPECT_EQ(b.prompt_cap(), StepBudget::kUncapped);
  b.observe(64, 0, 0.008);
  EXPECT_EQ(b.prompt_cap(), StepBudget::kUncapped) << "no prompt token measured yet";
  StepBudget off(0);
  off.observe(64, 0, 0.008);
  off.observe(64, 1024, step_seconds(1024));
  EXPECT_EQ(off.prompt_cap(), StepBudget::kUncapped);
}

TEST(StepBudget, CapsThePromptTokensToWhatFitsTheTarget) {
  StepBudget b(0.025);
  for (int i = 0; i < 5; ++i) b.observe(64, 0, 0.008);
  for (int64_t p : {1024, 2048, 512, 777}) b.observe(64, p, step_seconds(p));
  EXPECT_NEAR(b.decode_step_s(), 0.008, 1e-9);
  EXPECT_NEAR(b.prompt_token_s(), 30e-6, 1e-9);
  // (25 - 8) ms / 30 us.
  EXPECT_NEAR(static_cast<double>(b.prompt_cap()), 566.0, 1.0);
  // A step of that many prompt tokens is within the target.
  EXPECT_LE(step_seconds(b.prompt_cap()), 0.025);
}

TEST(StepBudget, FollowsACostThatChangesWithinAFewSteps) {
  StepBudget b(0.025);
  b.observe(64, 0, 0.008);
  for (int i = 0; i < 3; ++i) b.observe(64, 1024, step_seconds(1024));
  const int64_t before = b.prompt_cap();
  // Longer contexts: prompt tokens cost twice as much.
  for (int i = 0; i < 15; ++i) b.observe(64, 512, step_seconds(512, 60e-6));
  EXPECT_NEAR(static_cast<double>(b.prompt_cap()), before / 2.0, before * 0.05);
}

TEST(StepBudget, NeverBelowOneBlockAndIgnoresWhatSaysNothing) {
  StepBudget b(0.005);  // below a decode step's time
  b.observe(64, 0, 0.008);
  b.observe(64, 1024, step_seconds(1024));
  EXPECT_EQ(b.prompt_cap(), StepBudget::kFloorTokens);
  StepBudget c(0.025);
  c.observe(64, 0, 0.008);
  c.observe(64, 1024, step_seconds(1024));
  const double token_s = c.prompt_token_s();
  c.observe(64, 1024, -1.0);
  c.observe(64, 1024, std::numeric_limits<double>::quiet_NaN());
  c.observe(0, 0, 0.001);  // an empty step
  EXPECT_EQ(c.prompt_token_s(), token_s);
  EXPECT_EQ(c.decode_step_s(), 0.008);
  // A prompt's 4-token tail, whose step is mostly fixed time, counts by its tokens.
  c.observe(64, 4, 0.008 + 0.003);
  EXPECT_NEAR(c.prompt_token_s(), token_s, 0.05 * token_s);
}

// A mixed step has a fixed part beyond a decode step's (3 ms here): the cap
// settles at the largest chunk whose step fits the target, from a cap that
// a cold first measurement made far too small, and from an uncapped start.
TEST(StepBudget, SettlesAtTheLargestChunkThatFitsFromAnyStart) {
  auto mixed = [](int64_t p) { return 0.008 + 0.003 + 30e-6 * p; };
  const double want = (0.025 - 0.008 - 0.003) / 30e-6;  // 466 tokens
  for (double first_step : {0.4, 0.015}) {
    StepBudget b(0.025);
    b.observe(64, 0, 0.008);
    b.observe(64, 512, first_step);  // 0.4 s: a shape's first run, its kernels chosen then
    for (int i = 0; i < 60; ++i) {
      const int64_t p = std::min<int64_t>(b.prompt_cap(), 4096);
      b.observe(64, p, mixed(p));
    }
    EXPECT_NEAR(static_cast<double>(b.prompt_cap()), want, 0.03 * want) << "first step " << first_step << " s";
    EXPECT_LE(mixed(b.prompt_cap()), 0.025 * 1.03);
  }
}

TEST(ServeLoopStats, SaysTheEngineAndLoopTimesAndWhatTheBudgetWorkedFrom) {
  StepBudget budget(0.025);
  ServeLoopStats stats;
  EXPECT_TRUE(stats.closing_lines(budget).empty()) << "nothing stepped";
  // Two decode steps and one with 500 prompt tokens: 4, 4 and 19 ms in the
  // engine, each iteration 100 us longer.
  for (const auto& [rows, tokens, engine_s] : {std::tuple{64, int64_t{0}, 0.004}, std::tuple{64, int64_t{0}, 0.004},
                                               std::tuple{63, int64_t{500}, 0.019}}) {
    budget.observe(rows, tokens, engine_s);
    stats.observe(rows, tokens, engine_s, engine_s + 100e-6);
  }
  const std::vector<std::string> lines = stats.closing_lines(budget);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "3 steps, 9000.0 us a step in the engine and 100.0 us around it (requests in, scheduling, "
                      "tokens out)");
  // The prompt step cost 15 ms beyond a 4 ms decode step: 30 us a token,
  // so 21 ms of the 25 ms target left take 700.
  EXPECT_EQ(lines[1], "1 steps took prompt tokens beside decode rows, 500 on average; at the end a decode step "
                      "took 4.00 ms and a prompt token 30.0 us, for a cap of 700 tokens a step");
  // A prompt step with no decode rows is not one the cap applies to.
  ServeLoopStats alone;
  alone.observe(0, 2048, 0.05, 0.05);
  ASSERT_EQ(alone.closing_lines(StepBudget(0)).size(), 1u);
}

}  // namespace
}  // namespace cohort::infer
