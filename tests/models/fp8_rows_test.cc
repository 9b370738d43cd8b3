// Activations as e4m3 (models/ops/fp8_rows.h), the reference the CUDA
// kernel is held to (fp8_gemm_gpu_test.cc): each (row, 128 columns) block's
// power-of-two scale puts its largest value in (224, 448], codes are the
// exact quotients rounded once, the scales lie block-major, and padded rows
// are zero codes with scale 1.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/half_float.h"
#include "models/ops/fp8_rows.h"
#include "models/quant/fp8_e4m3.h"

namespace cohort::models {
namespace {

TEST(Fp8Rows, TheScaleIsTheLeastPowerOfTwoThatBringsTheBlockWithin448) {
  EXPECT_EQ(fp8_rows_scale(448.0f), 1.0f);
  EXPECT_EQ(fp8_rows_scale(std::nextafter(448.0f, 1e9f)), 2.0f);
  EXPECT_EQ(fp8_rows_scale(std::nextafter(224.0f, 1e9f)), 1.0f);
  EXPECT_EQ(fp8_rows_scale(224.0f), 0.5f);
  EXPECT_EQ(fp8_rows_scale(1.0f), std::ldexp(1.0f, -8));  // 1 / 2^-8 = 256
  EXPECT_EQ(fp8_rows_scale(3.0e5f), 1024.0f);
  for (float amax : {1e-30f, 3.7e-3f, 0.11f, 7.5f, 1234.5f, 6.0e20f}) {
    const float s = fp8_rows_scale(amax);
    EXPECT_EQ(s, std::ldexp(1.0f, std::ilogb(s))) << amax << ": not a power of two";
    EXPECT_LE(amax / s, 448.0f) << amax;
    EXPECT_GT(amax / s, 224.0f) << amax;
  }
  EXPECT_EQ(fp8_rows_scale(0.0f), 1.0f);
  EXPECT_EQ(fp8_rows_scale(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(fp8_rows_scale(std::numeric_limits<float>::quiet_NaN()), 1.0f);
}

TEST(Fp8Rows, CodesAreEachValueOverItsBlocksScaleAndPaddedRowsAreZero) {
  const int n = 3, n_pad = fp8_rows_padded(n), cols = 256;
  ASSERT_EQ(n_pad, 4);
  std::vector<Bf16Bits> x(static_cast<size_t>(n) * cols);
  // Blocks of very different magnitudes, and one of zeros.
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float magnitude = (c < 128 ? 1e-3f : 50.0f) * float(r + 1);
      const float v = r == 1 && c >= 128 ? 0.0f : magnitude * std::sin(0.37f * float(r * cols + c) + 0.1f);
      x[size_t(r) * cols + c] = float_to_bf16_bits(v);
    }
  }
  std::vector<uint8_t> codes(size_t(n_pad) * cols, 0xaa);
  std::vector<float> scales(size_t(n_pad) * 2, -1.0f);
  cpu::quantize_rows_e4m3(codes.data(), scales.data(), x.data(), n, n_pad, cols);
  for (int r = 0; r < n_pad; ++r) {
    for (int b = 0; b < 2; ++b) {
      const float s = scales[size_t(b) * n_pad + r];  // block-major
      if (r >= n || (r == 1 && b == 1)) {
        EXPECT_EQ(s, 1.0f) << r << ", " << b;
      }
      float amax = 0.0f;
      for (int c = b * 128; c < (b + 1) * 128; ++c) {
        const uint8_t code = codes[size_t(r) * cols + c];
        if (r >= n) {
          EXPECT_EQ(code, 0) << "padded row " << r;
          continue;
        }
        const float v = bf16_bits_to_float(x[size_t(r) * cols + c]);
        amax = std::max(amax, std::fabs(v));
        EXPECT_EQ(code, quant::float_to_e4m3(v / s)) << r << ", " << c;
        // e4m3 keeps 3 mantissa bits: half a step of 1/8 relative, above its subnormals.
        const float back = quant::e4m3_to_float(code) * s;
        if (std::fabs(v) > s * std::ldexp(1.0f, -6)) {
          EXPECT_LE(std::fabs(back - v), std::fabs(v) / 16) << r << ", " << c;
        }
      }
      if (r < n && amax > 0) {
        EXPECT_EQ(s, fp8_rows_scale(amax));
      }
    }
  }
}

}  // namespace
}  // namespace cohort::models
