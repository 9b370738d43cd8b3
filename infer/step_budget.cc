#include "infer/step_budget.h"

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

}  // namespace cohort::infer
