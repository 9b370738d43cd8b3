// AdamW over flat parameter groups.
#include "models/optimizer.h"

#include <algorithm>
#include <cmath>

namespace cohort::models {

void adamw_update_range(Backend& backend, const ParamGroup& group, size_t begin, size_t end,
                        float* params, const float* grads, float* m, float* v,
                        const AdamWConfig& config, int64_t step) {
  // Adjacent parameters with the same decay flag go in one launch.
  size_t run_begin = begin;
  bool run_decay = false, in_run = false;
  auto flush = [&](size_t run_end) {
    if (!in_run || run_end <= run_begin) return;
    const size_t at = run_begin - begin;
    backend.adamw_update(params + at, grads + at, m + at, v + at, run_end - run_begin, config, step,
                         run_decay);
  };
  for (const ParamSpec& p : group.params) {
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    if (!in_run || p.weight_decay != run_decay) {
      flush(lo);
      run_begin = lo, run_decay = p.weight_decay, in_run = true;
    }
  }
  flush(end);
}

AdamW::AdamW(Model& model, const AdamWConfig& config) : model_(model), config_(config) {
  for (const ParamGroup& g : model_.layout().groups) {
    m_.push_back(model_.backend().alloc_floats(g.numel));
    v_.push_back(model_.backend().alloc_floats(g.numel));
  }
}

AdamW::~AdamW() {
  for (float* p : m_) model_.backend().free(p);
  for (float* p : v_) model_.backend().free(p);
}

double AdamW::grad_norm() const {
  // One host round trip for all groups.
  std::vector<FloatRange> ranges;
  for (int g = 0; g < model_.num_groups(); ++g) {
    ranges.push_back({model_.grads(g), model_.layout().groups[g].numel});
  }
  return std::sqrt(model_.backend().sum_of_squares_ranges(ranges));
}

double AdamW::clip_grad_norm(float max_norm) {
  const double norm = grad_norm();
  const float coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0f) {
    for (int g = 0; g < model_.num_groups(); ++g) {
      model_.backend().scale(model_.grads(g), model_.layout().groups[g].numel, coef);
    }
  }
  return norm;
}

void AdamW::step() {
  ++step_;
  for (int g = 0; g < model_.num_groups(); ++g) {
    const ParamGroup& group = model_.layout().groups[g];
    adamw_update_range(model_.backend(), group, 0, group.numel, model_.params(g), model_.grads(g),
                       m_[g], v_[g], config_, step_);
  }
}

}  // namespace cohort::models
