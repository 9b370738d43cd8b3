// Reductions shared by every backend (element types: base/dtype.h), and the CPU
// arithmetic the CPU backends need where their libraries lack it (Gloo and
// MPI know nothing of bf16; Gloo's f16 is not ours).
//
// bf16 and f16 are reduced by widening each pair of elements to f32, applying
// the operation and rounding back to nearest-even, exactly as NCCL does for a
// two-input step; results therefore depend on the reduction order, and the
// tests bound them by that rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/dtype.h"

namespace cohort::collective {

using cohort::DType;  // base/dtype.h: one enum for collective/ and models/; all six move and reduce
enum class ReduceOp { kSum, kAvg, kMax, kMin };

const char* reduce_op_name(ReduceOp op);

// Half-precision conversions: base/half_float.h (the one definition).

// out[i] = op(a[i], b[i]) for `count` elements; out may alias a or b. kAvg
// reduces like kSum (the division happens once, at the end).
void reduce_cpu(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// buf[i] /= divisor, rounding like the dtype's own division (integers
// truncate toward zero, as NCCL's average does).
void divide_cpu(DType dtype, void* buf, size_t count, int divisor);

}  // namespace cohort::collective
