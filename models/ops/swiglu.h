// SwiGLU gate of the MLP and the residual add (CPU fp32; CUDA in swiglu.cuh).
//   h = silu(g) * u,  silu(g) = g * sigmoid(g)
// over n elements (g = gate_proj(x), u = up_proj(x), both [tokens, I]).
// Backward accumulates (+=) into dg and du.
//
// The bf16 decode engine fuses gate and up into one projection, gate_up
// [n, 2I] (gate columns first), and writes h in bf16: swiglu_bf16, whose
// reference is swiglu_fused (swiglu_forward row by row).
#pragma once

#include <cstddef>

#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

void swiglu_forward(float* h, const float* g, const float* u, size_t n);
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                     size_t n);
// out = a + b (out may alias a). Its backward is the identity on both inputs,
// which the model applies by letting the residual gradient flow through.
void residual_forward(float* out, const float* a, const float* b, size_t n);
// h [n, I] = silu(gate) * up with gate_up [n, 2I], gate columns first.
void swiglu_fused(float* h, const float* gate_up, int n, int intermediate);

}  // namespace cohort::models::cpu

// CUDA launcher (swiglu.cuh): device pointers, on `stream`, no allocation.
namespace cohort::models::cuda {

void swiglu_bf16(const float* gate_up, Bf16Bits* h, int n, int intermediate, CUstream_st* stream);

}  // namespace cohort::models::cuda
