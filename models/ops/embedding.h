// Token embedding lookup, forward and backward (CPU fp32 reference; the CUDA
// kernels are in embedding.cuh).
//
// The table may be a vocabulary shard (rows [vocab_begin, vocab_begin + rows)):
// ids outside the shard produce zero rows, so summing the outputs of all
// tensor-parallel ranks yields the full lookup (vocab-parallel embedding).
// Backward accumulates (+=) into the table gradient.
#pragma once

#include <cstdint>

namespace cohort::models::cpu {

// out[n, dim] = table[ids[i] - vocab_begin] (or 0 when outside the shard).
void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                       int vocab_begin, int rows);
// dtable[ids[i] - vocab_begin] += dout[i] for ids inside the shard.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n, int dim,
                        int vocab_begin, int rows);

}  // namespace cohort::models::cpu
