// Test data for the collective matrix: a deterministic value per (rank,
// element) for each dtype, and the tolerance a reduction of such values may
// carry. Shared by the CPU worker and the GPU test.
//
// Integers are chosen so that sums over 8 ranks stay exact (u8 below 256);
// floats are fractions that round when stored, so that bf16/f16 sums really
// exercise rounding: the tolerance is one rounding of the dtype per reduction
// step, on the sum of magnitudes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/half_float.h"
#include "collective/types.h"

namespace cohort::collective::testing {

inline bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// Unit roundoff of each float dtype.
inline double epsilon(DType t) {
  switch (t) {
    case DType::kF32:
      return std::ldexp(1.0, -24);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    default:
      return 0;
  }
}

inline void store_value(DType t, void* base, size_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(v));
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = float_to_f16_bits(static_cast<float>(v));
      break;
    case DType::kI32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DType::kU8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
  }
}

inline double load_value(DType t, const void* base, size_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

// The value rank r holds at element i, already rounded to the dtype.
inline double value_at(DType t, int r, size_t i) {
  double v = 0;
  switch (t) {
    case DType::kU8:
      v = static_cast<double>((static_cast<size_t>(r) + i) % 8);
      break;
    case DType::kI32:
      v = static_cast<double>((i * 7 + static_cast<size_t>(r) * 3) % 1000) - 500 + r * 100000;
      break;
    case DType::kI64:
      v = static_cast<double>((i * 7) % 1000) + std::ldexp(static_cast<double>(r + 1), 33);
      break;
    default:
      v = 0.1 * (r + 1) + 0.01 * static_cast<double>(i % 7) - 0.25;
      break;
  }
  unsigned char tmp[8];
  store_value(t, tmp, 0, v);
  return load_value(t, tmp, 0);
}

inline std::vector<unsigned char> make_buffer(DType t, size_t count) {
  return std::vector<unsigned char>(count * dtype_size(t) + 1);  // +1: never a zero-size data()
}

inline void fill(DType t, void* base, int rank, size_t count, size_t first_element = 0) {
  for (size_t i = 0; i < count; ++i) store_value(t, base, i, value_at(t, rank, first_element + i));
}

// Expected reduction of element i over ranks [0, size) and its tolerance.
struct Expected {
  double value;
  double tolerance;
};

inline Expected expected_reduce(DType t, ReduceOp op, int size, size_t i) {
  double sum = 0, mag = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < size; ++r) {
    double v = value_at(t, r, i);
    sum += v;
    mag += std::fabs(v);
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case ReduceOp::kMax:
      return {mx, 0};
    case ReduceOp::kMin:
      return {mn, 0};
    case ReduceOp::kSum:
      return {sum, epsilon(t) * size * mag};
    case ReduceOp::kAvg:
      if (!is_float(t)) return {std::trunc(sum / size), 0};
      // NCCL pre-multiplies each input by 1/size before summing: one more
      // rounding per input than a sum followed by a division.
      return {sum / size, epsilon(t) * (2 * size + 1) * mag / size};
  }
  return {0, 0};
}

inline bool close_enough(double got, const Expected& e) {
  return std::fabs(got - e.value) <= e.tolerance;
}

}  // namespace cohort::collective::testing
