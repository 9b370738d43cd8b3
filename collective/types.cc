// CPU element arithmetic for the CPU backends.
#include "collective/types.h"

#include "base/half_float.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cohort::collective {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

namespace {

template <typename T>
T apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
    default:
      return static_cast<T>(a + b);
  }
}

template <typename T>
void reduce_typed(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = apply(op, x[i], y[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_half(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FromFloat(apply(op, ToFloat(x[i]), ToFloat(y[i])));
}

template <typename T>
void divide_typed(void* buf, size_t n, int d) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void divide_half(void* buf, size_t n, int d) {
  auto* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) / static_cast<float>(d));
}

}  // namespace

void reduce_cpu(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (dtype) {
    case DType::kF32:
      return reduce_typed<float>(op, out, a, b, n);
    case DType::kBF16:
      return reduce_half<bf16_bits_to_float, float_to_bf16_bits>(op, out, a, b, n);
    case DType::kF16:
      return reduce_half<f16_bits_to_float, float_to_f16_bits>(op, out, a, b, n);
    case DType::kI32:
      return reduce_typed<int32_t>(op, out, a, b, n);
    case DType::kI64:
      return reduce_typed<int64_t>(op, out, a, b, n);
    case DType::kU8:
      return reduce_typed<uint8_t>(op, out, a, b, n);
  }
}

void divide_cpu(DType dtype, void* buf, size_t n, int d) {
  switch (dtype) {
    case DType::kF32:
      return divide_typed<float>(buf, n, d);
    case DType::kBF16:
      return divide_half<bf16_bits_to_float, float_to_bf16_bits>(buf, n, d);
    case DType::kF16:
      return divide_half<f16_bits_to_float, float_to_f16_bits>(buf, n, d);
    case DType::kI32:
      return divide_typed<int32_t>(buf, n, d);
    case DType::kI64:
      return divide_typed<int64_t>(buf, n, d);
    case DType::kU8:
      return divide_typed<uint8_t>(buf, n, d);
  }
}

}  // namespace cohort::collective
