#include "models/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace cohort::models {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  state_.scale = options.initial_scale;
}

Result<LossScaler> LossScaler::create(const LossScalerOptions& o) {
  if (!(o.initial_scale > 0) || !std::isfinite(o.initial_scale))
    return invalid_argument(fmt::format("initial loss scale must be a positive number, got {}", o.initial_scale));
  if (o.growth_interval < 1)
    return invalid_argument(fmt::format("loss scale growth interval must be at least 1, got {}", o.growth_interval));
  if (!(o.growth > 1) || !(o.backoff > 0 && o.backoff < 1))
    return invalid_argument(fmt::format("loss scale growth {} must be > 1 and backoff {} in (0, 1)", o.growth, o.backoff));
  return LossScaler(o);
}

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    state_.scale = std::max(options_.min_scale, state_.scale * options_.backoff);
    state_.finite_steps = 0;
    return false;
  }
  if (++state_.finite_steps >= options_.growth_interval) {
    state_.scale = std::min(options_.max_scale, state_.scale * options_.growth);
    state_.finite_steps = 0;
  }
  return true;
}

Status LossScaler::restore(const LossScalerState& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.finite_steps < 0)
    return invalid_argument(fmt::format("loss scaler state: scale {} and finite steps {} are not valid", state.scale,
                                        state.finite_steps));
  state_ = state;
  return Status::ok();
}

}  // namespace cohort::models
