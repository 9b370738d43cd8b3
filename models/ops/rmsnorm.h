// RMSNorm, forward and backward (CPU fp32 reference; CUDA in rmsnorm.cuh).
//
//   out = x * rstd * w,   rstd = 1 / sqrt(mean(x^2) + eps)
// over the last dimension `dim` of `n` rows, as HF's LlamaRMSNorm / Qwen3RMSNorm
// compute it in fp32. The same op is the per-head QK norm of Qwen3: rows are
// then (token, head) pairs and dim is head_dim. Forward saves rstd [n] for
// backward; backward accumulates (+=) into dx and dw.
#pragma once

namespace cohort::models::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n, int dim,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int n, int dim);

}  // namespace cohort::models::cpu
