#include "infer/step_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace cohort::infer {
namespace {

// Weight of the newest measurement: a few steps follow a change of load
// (longer contexts, more streams) without one slow step swinging the cap.
constexpr double kNewest = 0.2;

double blend(double average, double sample) {
  return average == 0 ? sample : (1 - kNewest) * average + kNewest * sample;
}

}  // namespace

int64_t StepBudget::prompt_cap() const {
  if (!(target_s_ > 0) || decode_s_ == 0 || token_s_ == 0) return kUncapped;
  const double left = target_s_ - decode_s_;
  if (left <= 0) return kFloorTokens;
  return std::max<int64_t>(kFloorTokens, static_cast<int64_t>(std::floor(left / token_s_)));
}

void StepBudget::observe(int decode_rows, int64_t prompt_tokens, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  if (prompt_tokens == 0) {
    if (decode_rows > 0) decode_s_ = blend(decode_s_, seconds);
    return;
  }
  // What the prompt tokens added to the step: beyond a decode step's time
  // where the step had decode rows (a whole step's otherwise). The time
  // and the tokens are averaged apart, so a step counts by its tokens: the
  // short tail of a prompt, whose time is mostly the step's fixed part,
  // moves the estimate little. A mixed step's fixed part (beyond a decode
  // step's) is spread over its tokens, which makes the estimate high for
  // small chunks; the cap it gives is the largest chunk whose step fits
  // the target all the same (t = decode + fixed + c p at p = cap), and it
  // settles there from any start, a stuck-low cap included.
  const double beyond = decode_rows > 0 && decode_s_ > 0 ? std::max(0.0, seconds - decode_s_) : seconds;
  prompt_s_ = blend(prompt_s_, beyond);
  prompt_tokens_ = blend(prompt_tokens_, static_cast<double>(prompt_tokens));
  token_s_ = prompt_s_ / prompt_tokens_;
}

void ServeLoopStats::observe(int decode_rows, int64_t prompt_tokens, double engine_s, double iteration_s) {
  ++steps_;
  engine_s_ += engine_s, iteration_s_ += iteration_s;
  if (decode_rows > 0 && prompt_tokens > 0) ++mixed_steps_, mixed_tokens_ += prompt_tokens;
}

std::vector<std::string> ServeLoopStats::closing_lines(const StepBudget& budget) const {
  std::vector<std::string> lines;
  if (steps_ == 0) return lines;
  const double steps = static_cast<double>(steps_);
  lines.push_back(fmt::format("{} steps, {:.1f} us a step in the engine and {:.1f} us around it (requests in, "
                              "scheduling, tokens out)",
                              steps_, 1e6 * engine_s_ / steps, 1e6 * std::max(0.0, iteration_s_ - engine_s_) / steps));
  if (mixed_steps_ > 0) {
    const int64_t cap = budget.prompt_cap();
    lines.push_back(fmt::format("{} steps took prompt tokens beside decode rows, {:.0f} on average; at the end a "
                                "decode step took {:.2f} ms and a prompt token {:.1f} us, for a cap of {} tokens a step",
                                mixed_steps_, static_cast<double>(mixed_tokens_) / static_cast<double>(mixed_steps_),
                                1e3 * budget.decode_step_s(), 1e6 * budget.prompt_token_s(),
                                cap == StepBudget::kUncapped ? std::string("none") : std::to_string(cap)));
  }
  return lines;
}

}  // namespace cohort::infer
