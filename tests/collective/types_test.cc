// Half-precision conversions and the CPU reductions the Gloo and MPI
// backends use for bf16 and f16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/half_float.h"
#include "collective/types.h"

namespace cohort::collective {
namespace {

TEST(HalfConversions, RoundTripExactValues) {
  for (float f : {0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, -0.0f}) {
    EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(f)), f) << f;
  }
  for (float f : {0.0f, 1.0f, -2.5f, std::ldexp(1.0f, 127), std::ldexp(1.0f, -126)}) {
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(f)), f) << f;
  }
}

TEST(HalfConversions, RoundToNearestEven) {
  // 1 + 2^-11 is halfway between two f16 values: ties go to the even one.
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(70000.0f)), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
}

TEST(HalfConversions, SubnormalsSurvive) {
  float smallest = std::ldexp(1.0f, -24);  // the least f16 subnormal
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(smallest)), smallest);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(3 * smallest)), 3 * smallest);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(smallest / 4)), 0.0f);
}

TEST(CpuReduce, AppliesEachOperationPerDtype) {
  uint16_t a[2] = {float_to_bf16_bits(1.5f), float_to_bf16_bits(-2.0f)};
  uint16_t b[2] = {float_to_bf16_bits(2.0f), float_to_bf16_bits(4.0f)};
  uint16_t out[2];
  reduce_cpu(DType::kBF16, ReduceOp::kSum, out, a, b, 2);
  EXPECT_EQ(bf16_bits_to_float(out[0]), 3.5f);
  EXPECT_EQ(bf16_bits_to_float(out[1]), 2.0f);
  reduce_cpu(DType::kBF16, ReduceOp::kMin, out, a, b, 2);
  EXPECT_EQ(bf16_bits_to_float(out[1]), -2.0f);
  int64_t x[1] = {int64_t{1} << 40}, y[1] = {3};
  reduce_cpu(DType::kI64, ReduceOp::kMax, x, x, y, 1);
  EXPECT_EQ(x[0], int64_t{1} << 40);
  int32_t z[2] = {7, -7};
  divide_cpu(DType::kI32, z, 2, 2);
  EXPECT_EQ(z[0], 3);
  EXPECT_EQ(z[1], -3);  // truncates toward zero, as ncclAvg does
}

}  // namespace
}  // namespace cohort::collective
