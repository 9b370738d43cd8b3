// Softmax + cross-entropy, fused, with an ignore index (CPU fp32; CUDA in
// cross_entropy.cuh).
//
// logits [n, vocab_local] hold the columns [vocab_begin, vocab_begin +
// vocab_local) of the full vocabulary: the whole vocabulary without tensor
// parallelism, one shard with it (vocab-parallel cross-entropy: row max and
// sums are completed through `tp`). targets are global ids; a target equal to
// kIgnoreIndex (-100, as HF) contributes no loss and no gradient.
//
// losses[i] receives the per-token loss (0 when ignored). With `grad_scale` !=
// 0 the logits are overwritten by their gradient, grad_scale * (softmax -
// onehot), as llm.c does, so no second [n, V] buffer exists. `scratch` holds
// 3n floats.
#pragma once

#include <cstdint>

#include "models/tensor_parallel.h"

namespace cohort::models {
inline constexpr int32_t kIgnoreIndex = -100;
}

namespace cohort::models::cpu {

void cross_entropy_forward_backward(float* losses, float* logits, float* scratch,
                                    const int32_t* targets, int n, int vocab_local, int vocab_begin,
                                    float grad_scale, const TensorParallelComm* tp);

}  // namespace cohort::models::cpu
