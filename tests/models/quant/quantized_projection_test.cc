// The quantized projection contract (models/quant/quantized_projection.h):
// y = x · W^T (+ bias) for every format × row count a decode step uses ×
// x/y dtype, against W's definition (the tests' own packers for GPTQ and
// AWQ; the quantizers' output for the formats cohort makes). A CUDA
// implementation joins this matrix with a tolerance.
#include <gtest/gtest.h>

#include "base/half_float.h"
#include "models/quant/quantized_projection.h"
#include "tests/models/quant/reference_packers.h"

namespace cohort::models::quant {
namespace {

constexpr int64_t kOut = 48, kIn = 256;

struct Weight {
  QuantizedWeight packed;
  std::vector<float> matrix;  // [kOut, kIn] by the format's definition
};

Weight make_weight(const std::string& format) {
  Weight w;
  if (format == "gptq" || format == "awq") {
    const bool gptq = format == "gptq";
    const testing::IntegerWeight iw = testing::random_integer_weight(kOut, kIn, 64, 4, 1, gptq, 41);
    const testing::PackedTensors t =
        gptq ? testing::pack_gptq_reference(iw, 4, true) : testing::pack_awq_reference(iw);
    w.packed.format = gptq ? WeightFormat::kGptq : WeightFormat::kAwq;
    w.packed.name = "model.layers.0.mlp.gate_proj.weight";
    w.packed.rows = kOut, w.packed.cols = kIn, w.packed.bits = 4, w.packed.group_size = 64;
    w.packed.packed = t.qweight, w.packed.zeros = t.qzeros, w.packed.scales = t.scales;
    if (gptq) w.packed.g_idx = t.g_idx;
    w.matrix = testing::integer_weight_matrix(iw, gptq);
    return w;
  }
  const WeightFormat f = format == "fp8"    ? WeightFormat::kFp8Block
                         : format == "int8" ? WeightFormat::kInt8
                         : format == "int4" ? WeightFormat::kInt4
                                            : WeightFormat::kNf4;
  const std::vector<float> x = testing::random_weights(kOut * kIn, 42);
  w.packed = *quantize(f, "w", x.data(), kOut, kIn);
  w.matrix.resize(x.size());
  EXPECT_TRUE(dequantize(w.packed, w.matrix.data()).is_ok());
  return w;
}

struct ProjectionCase {
  std::string format;
  int rows;
};

class QuantizedProjectionMatrix : public ::testing::TestWithParam<ProjectionCase> {};

TEST_P(QuantizedProjectionMatrix, CpuProjectionIsTheDoubleSumOverTheDequantizedWeight) {
  const ProjectionCase c = GetParam();
  const Weight w = make_weight(c.format);
  auto projection = make_cpu_quantized_projection();
  const std::vector<float> bias = testing::random_weights(kOut, 43);
  for (DType x_dtype : {DType::kF32, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string("x ") + dtype_name(x_dtype) + ", y " + dtype_name(y_dtype));
      std::vector<float> x = testing::random_weights(size_t(c.rows) * kIn, 44, 1.0f);
      std::vector<uint16_t> x_bf16(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x_bf16[i] = float_to_bf16_bits(x[i]);
        if (x_dtype == DType::kBF16) x[i] = bf16_bits_to_float(x_bf16[i]);
      }
      std::vector<float> y(size_t(c.rows) * kOut);
      std::vector<uint16_t> y_bf16(y.size());
      ProjectionArgs args;
      args.x = x_dtype == DType::kF32 ? static_cast<const void*>(x.data()) : x_bf16.data();
      args.x_dtype = x_dtype;
      args.rows = c.rows;
      args.y = y_dtype == DType::kF32 ? static_cast<void*>(y.data()) : y_bf16.data();
      args.y_dtype = y_dtype;
      args.bias = c.rows % 2 ? bias.data() : nullptr;
      const PackedWeightView view = view_of(w.packed);
      ASSERT_TRUE(projection->supports(view, args).is_ok());
      ASSERT_TRUE(projection->project(view, args).is_ok());
      for (int i = 0; i < c.rows; ++i) {
        for (int64_t n = 0; n < kOut; ++n) {
          double sum = args.bias ? bias[size_t(n)] : 0.0;
          for (int64_t k = 0; k < kIn; ++k)
            sum += double(x[size_t(i * kIn + k)]) * double(w.matrix[size_t(n * kIn + k)]);
          const size_t at = size_t(i * kOut + n);
          if (y_dtype == DType::kF32)
            ASSERT_EQ(y[at], float(sum)) << "row " << i << " out " << n;
          else
            ASSERT_EQ(y_bf16[at], float_to_bf16_bits(float(sum))) << "row " << i << " out " << n;
        }
      }
    }
  }
}

// The row counts the decode engine's tiles use (1, and 9-64 on tensor
// cores) and a prefill-sized one.
INSTANTIATE_TEST_SUITE_P(FormatsByRows, QuantizedProjectionMatrix, ::testing::ValuesIn([] {
                           std::vector<ProjectionCase> cases;
                           for (const char* f : {"fp8", "gptq", "awq", "int8", "int4", "nf4"})
                             for (int rows : {1, 3, 9, 64, 130}) cases.push_back({f, rows});
                           return cases;
                         }()),
                         [](const auto& info) {
                           return info.param.format + "_rows" + std::to_string(info.param.rows);
                         });

TEST(QuantizedProjection, UnsupportedDtypesAndEmptyArgumentsAreRefused) {
  const Weight w = make_weight("int8");
  auto projection = make_cpu_quantized_projection();
  std::vector<float> x(kIn), y(kOut);
  ProjectionArgs args{x.data(), DType::kF16, 1, y.data(), DType::kF32, nullptr, nullptr};
  const Status f16 = projection->project(view_of(w.packed), args);
  ASSERT_FALSE(f16.is_ok());
  EXPECT_NE(f16.message().find("must be f32 or bf16, got f16"), std::string::npos) << f16.message();
  args.x_dtype = DType::kF32;
  args.rows = 0;
  EXPECT_FALSE(projection->project(view_of(w.packed), args).is_ok());
  EXPECT_STREQ(projection->name(), "cpu reference");
}

}  // namespace
}  // namespace cohort::models::quant
