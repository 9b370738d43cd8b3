// Linear layers y = x W^T (+ b), forward and backward (CPU: OpenBLAS sgemm;
// CUDA: cuBLAS in linear.cuh).
//
// Layout follows Hugging Face: W is [out, in] row-major, x is [n, in], y is
// [n, out]. A tensor-parallel column shard is a block of W's rows, a row shard
// a block of its columns, each stored contiguously as its own [out, in] matrix
// in the rank's flat buffer. Backward accumulates
// (+=) into dx, dw and db, so gradient accumulation across micro-batches is a
// matter of not zeroing.
#pragma once

namespace cohort::models::cpu {

// y = x W^T + b (b may be null). Overwrites y.
void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                    int out);
// dx += dy W, dw += dy^T x, db += sum_rows(dy). dx, dw, db may be null (a
// null dw is a frozen weight; x is then not read and may be null too).
void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* w, int n, int in, int out);

}  // namespace cohort::models::cpu
