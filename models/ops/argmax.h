// Greedy pick over vocab-sharded logits (CPU reference here and in
// argmax.cc; CUDA in argmax.cuh), as the bf16 decode engine does it on the
// device so that only token ids leave the GPU.
//
// Each tensor-parallel rank holds the logits of vocab columns [vocab_begin,
// vocab_begin + vocab_rows). row_argmax gives, per row, the largest value and
// its global index (the lowest on ties) as a (value, index bits) float pair,
// so one float all-gather carries both; merge_argmax takes the gathered
// pairs [tp, n, 2] of every rank (ascending vocab ranges) and keeps, per row,
// the largest value, the lowest index on ties, as torch.argmax does.
#pragma once

#include <cstdint>

#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

// out [n, 2]: (value, index as float bits).
void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin);
void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n);
// A step launched before the host has read the one before it (a server
// running ahead): rows[b] = previous[source[b]] where source[b] >= 0 (a
// decode row whose input is the previous step's pick, still on the
// device), rows[b] unchanged where source[b] < 0; b < n.
void take_tokens(int32_t* rows, const int32_t* previous, const int32_t* source, int n);

}  // namespace cohort::models::cpu

// Device pointers, on `stream`, no allocation.
namespace cohort::models::cuda {

// tokens: where the logits are the whole vocabulary (one rank), the
// picks' indices also go there, and no merge_argmax needs to follow.
void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin,
                CUstream_st* stream, int32_t* tokens = nullptr);
void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n, CUstream_st* stream);
void take_tokens(int32_t* rows, const int32_t* previous, const int32_t* source, int n, CUstream_st* stream);

}  // namespace cohort::models::cuda
