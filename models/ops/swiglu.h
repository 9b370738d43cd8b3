// SwiGLU gate of the MLP and the residual add (CPU fp32; CUDA in swiglu.cuh).
//   h = silu(g) * u,  silu(g) = g * sigmoid(g)
// over n elements (g = gate_proj(x), u = up_proj(x), both [tokens, I]).
// Backward accumulates (+=) into dg and du.
#pragma once

#include <cstddef>

namespace cohort::models::cpu {

void swiglu_forward(float* h, const float* g, const float* u, size_t n);
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                     size_t n);
// out = a + b (out may alias a). Its backward is the identity on both inputs,
// which the model applies by letting the residual gradient flow through.
void residual_forward(float* out, const float* a, const float* b, size_t n);

}  // namespace cohort::models::cpu
