// CPU element arithmetic for the CPU backends.
#include "collective/types.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cohort::collective {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 1;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

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

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // stays a quiet NaN
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise into f32's range
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to infinity
  if (abs < 0x38800000) {
    // Subnormal or zero in f16: shift the full mantissa into place and
    // round to nearest even on the bits shifted out.
    if (abs < 0x33000000) return sign;
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // value = m * 2^(e-150); f16 subnormal unit = 2^-24
    uint32_t half = 1u << (shift - 1);
    uint32_t rest = m & ((1u << shift) - 1);
    uint32_t out = m >> shift;
    if (rest > half || (rest == half && (out & 1))) ++out;
    return static_cast<uint16_t>(sign | out);
  }
  uint32_t out = ((abs - 0x38000000) >> 13);
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (out & 1))) ++out;
  return static_cast<uint16_t>(sign | out);
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
      return reduce_half<bf16_to_float, float_to_bf16>(op, out, a, b, n);
    case DType::kF16:
      return reduce_half<f16_to_float, float_to_f16>(op, out, a, b, n);
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
      return divide_half<bf16_to_float, float_to_bf16>(buf, n, d);
    case DType::kF16:
      return divide_half<f16_to_float, float_to_f16>(buf, n, d);
    case DType::kI32:
      return divide_typed<int32_t>(buf, n, d);
    case DType::kI64:
      return divide_typed<int64_t>(buf, n, d);
    case DType::kU8:
      return divide_typed<uint8_t>(buf, n, d);
  }
}

}  // namespace cohort::collective
