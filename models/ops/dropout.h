// Dropout with a counter-based mask (CPU fp32; CUDA in dropout.cuh).
//
//   out[r, c] = keep(r, c) ? x[r, c] / (1 - p) : 0
// over a [rows, cols] block that is columns [col_begin, col_begin + cols) of
// a [rows, global_cols] tensor. keep(r, c) is a pure function of (seed, r,
// col_begin + c) (counter_random.h), so the mask is never stored: backward,
// a forward recomputed under activation checkpointing, the CPU and the CUDA
// backends, and a tensor-parallel column slice all draw the same one.
// Backward accumulates: dx += keep ⊙ dout / (1 - p).
#pragma once

#include <cstdint>

#include "models/counter_random.h"

namespace cohort::models {

struct DropoutMask {
  uint64_t seed = 0;
  float p = 0.0f;       // probability of dropping, in [0, 1)
  int col_begin = 0;    // where the block's columns sit in the whole row
  int global_cols = 0;  // the whole row's width
};

COHORT_RANDOM_FN bool dropout_keeps(const DropoutMask& mask, uint64_t row, uint64_t col) {
  return counter_uniform(mask.seed, row * uint64_t(mask.global_cols) + uint64_t(mask.col_begin) +
                                        col) >= mask.p;
}

}  // namespace cohort::models

namespace cohort::models::cpu {

// out may alias x.
void dropout_forward(float* out, const float* x, int rows, int cols, const DropoutMask& mask);
void dropout_backward(float* dx, const float* dout, int rows, int cols, const DropoutMask& mask);

}  // namespace cohort::models::cpu
