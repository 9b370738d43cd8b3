// Token embedding lookup, forward and backward (CPU fp32 reference; the CUDA
// kernels are in embedding.cuh).
//
// The table may be a vocabulary shard (rows [vocab_begin, vocab_begin + rows)):
// ids outside the shard produce zero rows, so summing the outputs of all
// tensor-parallel ranks yields the full lookup (vocab-parallel embedding).
// Backward accumulates (+=) into the table gradient.
//
// The bf16 decode engine's lookup (embed_bf16) is the same math with a bf16
// table and fp32 rows out: its reference is embedding_forward on the table
// widened to fp32. gather_rows_bf16 picks the rows the LM head needs (the
// last position of each prompt of a packed prefill).
#pragma once

#include <cstdint>

#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

// out[n, dim] = table[ids[i] - vocab_begin] (or 0 when outside the shard).
void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                       int vocab_begin, int rows);
// dtable[ids[i] - vocab_begin] += dout[i] for ids inside the shard.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n, int dim,
                        int vocab_begin, int rows);
// dst [k, dim] = src rows idx[0..k).
void gather_rows(float* dst, const float* src, const int32_t* idx, int k, int dim);

}  // namespace cohort::models::cpu

// CUDA launchers (embedding.cuh); device pointers, enqueued on `stream`,
// no allocation, so they can be captured in a CUDA graph.
namespace cohort::models::cuda {

// x [n, hidden] fp32 = table[tokens[r] - vocab_begin] widened, zeros
// outside [vocab_begin, vocab_begin + vocab_rows).
void embed_bf16(float* x, const Bf16Bits* table, const int32_t* tokens, int n, int hidden,
                int vocab_begin, int vocab_rows, CUstream_st* stream);
// dst [k, hidden] = src rows idx[0..k), bf16.
void gather_rows_bf16(Bf16Bits* dst, const Bf16Bits* src, const int32_t* idx, int k, int hidden,
                      CUstream_st* stream);

}  // namespace cohort::models::cuda
