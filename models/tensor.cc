// Tensor views and the float conversions used by safetensors I/O.
#include "models/tensor.h"

#include <cmath>

#include "base/check.h"
#include "base/half_float.h"

namespace cohort::models {

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

Result<DType> parse_dtype(const std::string& name) {
  if (name == "F32" || name == "float32" || name == "f32") return DType::kF32;
  if (name == "BF16" || name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "F16" || name == "float16" || name == "f16") return DType::kF16;
  if (name == "I32" || name == "int32" || name == "i32") return DType::kI32;
  return invalid_argument("unsupported dtype '" + name + "' (use F32, BF16, F16 or I32)");
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float* Tensor::f32() const {
  COHORT_CHECK(dtype == DType::kF32);
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  COHORT_CHECK(dtype == DType::kI32);
  return static_cast<int32_t*>(data);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  COHORT_CHECK(!shape.empty() && begin >= 0 && begin <= end && end <= shape[0]);
  Tensor out = *this;
  const int64_t row = shape[0] == 0 ? 0 : numel() / shape[0];
  out.data = static_cast<char*>(data) + begin * row * dtype_size(dtype);
  out.shape[0] = end - begin;
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint16_t f32_to_bf16(float value) { return float_to_bf16_bits(value); }
float bf16_to_f32(uint16_t bits) { return bf16_bits_to_float(bits); }
uint16_t f32_to_f16(float value) { return float_to_f16_bits(value); }
float f16_to_f32(uint16_t bits) { return f16_bits_to_float(bits); }

void convert_to_f32(float* dst, const void* src, DType src_dtype, size_t n) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    // Element by element through memcpy: a safetensors data section need not
    // be aligned (an odd header length), and a misaligned uint16_t load is
    // undefined behaviour (found by fuzz/safetensors_fuzz).
    case DType::kBF16: {
      const auto* s = static_cast<const char*>(src);
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const char*>(src);
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = f16_to_f32(v);
      }
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const char*>(src);
      for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, s + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    }
    case DType::kI64:
    case DType::kU8:
      break;
  }
  COHORT_CHECK_MSG(false, "model tensors hold f32, bf16, f16 or i32");
}

void convert_from_f32(void* dst, DType dst_dtype, const float* src, size_t n) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kI32: {
      auto* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(std::lround(src[i]));
      return;
    }
    case DType::kI64:
    case DType::kU8:
      break;
  }
  COHORT_CHECK_MSG(false, "model tensors hold f32, bf16, f16 or i32");
}

}  // namespace cohort::models
