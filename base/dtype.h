// DType: the element types cohort stores and moves, one vocabulary for
// models/ (tensors, kernels, safetensors files) and collective/ (what a
// Communicator moves and reduces), so that parallel/ hands a tensor's dtype
// to a collective as it is. Each layer says which of them it takes: model
// tensors hold f32, bf16, f16 or i32; collectives take all six.
#pragma once

#include <cstddef>

namespace cohort {

enum class DType { kF32, kBF16, kF16, kI32, kI64, kU8 };

// Where a tensor lives: one enum for models/ and collective/.
enum class Device { kCpu, kCuda };

// Bytes per element: 4, 2, 2, 4, 8, 1.
size_t dtype_size(DType dtype);
// "f32", "bf16", "f16", "i32", "i64", "u8": how cohort prints a dtype.
// Files keep their own spelling (safetensors' "F32": models/tensor.h).
const char* dtype_name(DType dtype);

}  // namespace cohort
