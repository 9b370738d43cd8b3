// CPU fused softmax cross-entropy, vocab-parallel when given a TP comm.
#include "models/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace cohort::models::cpu {

void cross_entropy_forward_backward(float* losses, float* logits, float* scratch,
                                    const int32_t* targets, int n, int vocab_local, int vocab_begin,
                                    float grad_scale, const TensorParallelComm* tp) {
  float* row_max = scratch;
  float* sum_exp = scratch + n;           // sum_exp and target_logit are adjacent so
  float* target_logit = scratch + 2 * n;  // one all-reduce completes both
  for (int i = 0; i < n; ++i) {
    const float* row = logits + static_cast<size_t>(i) * vocab_local;
    row_max[i] = *std::max_element(row, row + vocab_local);
  }
  if (tp && tp->all_reduce_max) tp->all_reduce_max(row_max, n);
  for (int i = 0; i < n; ++i) {
    const float* row = logits + static_cast<size_t>(i) * vocab_local;
    double sum = 0;
    for (int j = 0; j < vocab_local; ++j) sum += std::exp(row[j] - row_max[i]);
    sum_exp[i] = static_cast<float>(sum);
    const int t = targets[i] - vocab_begin;
    target_logit[i] = (targets[i] != kIgnoreIndex && t >= 0 && t < vocab_local) ? row[t] : 0.0f;
  }
  if (tp && tp->all_reduce_sum) tp->all_reduce_sum(sum_exp, 2 * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const bool ignored = targets[i] == kIgnoreIndex;
    losses[i] = ignored ? 0.0f : std::log(sum_exp[i]) + row_max[i] - target_logit[i];
    if (grad_scale == 0.0f) continue;
    float* row = logits + static_cast<size_t>(i) * vocab_local;
    if (ignored) {
      std::fill(row, row + vocab_local, 0.0f);
      continue;
    }
    const float inv = 1.0f / sum_exp[i];
    for (int j = 0; j < vocab_local; ++j) row[j] = std::exp(row[j] - row_max[i]) * inv;
    const int t = targets[i] - vocab_begin;
    if (t >= 0 && t < vocab_local) row[t] -= 1.0f;
    for (int j = 0; j < vocab_local; ++j) row[j] *= grad_scale;
  }
}

}  // namespace cohort::models::cpu
