// Tensors as cohort's model code sees them: a typed, shaped view into memory
// that someone else owns (a flat parameter buffer, an activation arena, an
// mmapped safetensors file). Views never own, so slicing a flat buffer for
// ZeRO/FSDP or tensor parallelism is pointer arithmetic, not a copy.
//
// Storage dtypes are f32, bf16, f16 and i32. Compute on CPU is always f32;
// the half types appear in files and, on GPU, in working copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace cohort::models {

// base/dtype.h: one DType and one Device for models/ and collective/. Model
// tensors hold f32, bf16, f16 or i32; i64 and u8 are collective-only.
using cohort::DType;
using cohort::Device;

// The safetensors format's own spelling ("F32", "BF16", "I64", ...), used
// only in those files' headers; cohort prints dtype_name's ("f32").
const char* safetensors_dtype_name(DType dtype);
// A model tensor's dtype from the safetensors or torch spelling ("BF16",
// "bfloat16", "bf16"); kInvalidArgument for anything but the four a model
// tensor holds.
Result<DType> parse_dtype(const std::string& name);

// A non-owning view: `data` points at element [0, 0, ...] of a row-major,
// contiguous tensor of `shape`.
struct Tensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  float* f32() const;    // CHECKs dtype f32
  int32_t* i32() const;  // CHECKs dtype i32
  // Rows [begin, end) of dimension 0, still contiguous.
  Tensor rows(int64_t begin, int64_t end) const;
};

std::string shape_string(const std::vector<int64_t>& shape);

// Half-precision conversions, round-to-nearest-even as torch does them.
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);

// Converts `n` elements of `src` (f32, bf16, f16 or i32) into f32.
void convert_to_f32(float* dst, const void* src, DType src_dtype, size_t n);
// Converts `n` f32 values into `dst_dtype` (f32, bf16 or f16).
void convert_from_f32(void* dst, DType dst_dtype, const float* src, size_t n);

}  // namespace cohort::models
