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

AdamW::AdamW(TrainableParams& params, Backend& backend, const AdamWConfig& config)
    : params_(params), backend_(backend), config_(config) {
  for (const ParamGroup& g : params_.layout().groups) {
    m_.push_back(g.numel ? backend_.alloc_floats(g.numel) : nullptr);
    v_.push_back(g.numel ? backend_.alloc_floats(g.numel) : nullptr);
  }
}

AdamW::~AdamW() {
  for (float* p : m_) if (p) backend_.free(p);
  for (float* p : v_) if (p) backend_.free(p);
}

double AdamW::grad_norm() const {
  // One host round trip for all groups.
  std::vector<FloatRange> ranges;
  for (int g = 0; g < params_.num_groups(); ++g) {
    const size_t n = params_.layout().groups[g].numel;
    if (n) ranges.push_back({params_.grads(g), n});
  }
  return std::sqrt(backend_.sum_of_squares_ranges(ranges));
}

double AdamW::clip_grad_norm(float max_norm) {
  const double norm = grad_norm();
  const float coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0f) {
    for (int g = 0; g < params_.num_groups(); ++g) {
      const size_t n = params_.layout().groups[g].numel;
      if (n) backend_.scale(params_.grads(g), n, coef);
    }
  }
  return norm;
}

void AdamW::step() {
  ++step_;
  for (int g = 0; g < params_.num_groups(); ++g) {
    const ParamGroup& group = params_.layout().groups[g];
    if (group.numel == 0) continue;
    adamw_update_range(backend_, group, 0, group.numel, params_.params(g), params_.grads(g), m_[g],
                       v_[g], config_, step_);
  }
}

}  // namespace cohort::models
