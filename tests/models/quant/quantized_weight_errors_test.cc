// Bad quantized tensors (wrong shapes, truncated buffers, group sizes that do
// not divide, g_idx naming missing groups) are InvalidArgument errors that
// name the tensor and say what is wrong; nothing is read out of bounds.
#include <gtest/gtest.h>

#include "models/quant/quantized_weight.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

const char* kName = "model.layers.7.mlp.down_proj.weight";

QuantizedWeight gptq_4bit(int64_t out, int64_t in, int64_t group) {
  QuantizedWeight w;
  w.format = WeightFormat::kGptq;
  w.name = kName;
  w.rows = out, w.cols = in, w.bits = 4, w.group_size = group;
  const int64_t groups = (in + group - 1) / group;
  w.packed.assign(size_t(in / 8 * out * 4), 0);
  w.zeros.assign(size_t(groups * out / 8 * 4), 0);
  w.scales.assign(size_t(groups * out), 1.0f);
  return w;
}

void expect_error(const QuantizedWeight& w, const std::string& fragment) {
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(w.rows * w.cols, 1)));
  const Status s = dequantize(w, out.data());
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning: " << fragment;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(kName), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(QuantizedWeightErrors, ATruncatedQweightNamesTheTensorAndTheSizes) {
  QuantizedWeight w = gptq_4bit(64, 128, 128);
  ASSERT_TRUE(validate(w).is_ok());
  w.packed.resize(w.packed.size() - 4);
  expect_error(w, "qweight (bytes) holds 4092 elements where 4096 are needed");
}

TEST(QuantizedWeightErrors, MissingScalesOrZerosAreErrors) {
  QuantizedWeight w = gptq_4bit(64, 128, 64);
  w.scales.pop_back();
  expect_error(w, "scales");
  w = gptq_4bit(64, 128, 64);
  w.zeros.clear();
  expect_error(w, "qzeros");
}

TEST(QuantizedWeightErrors, GptqShapesThatDoNotPackAreErrors) {
  expect_error(gptq_4bit(60, 128, 128), "multiples");  // out 60 is not a multiple of 8
  QuantizedWeight w = gptq_4bit(64, 128, 128);
  w.bits = 3;
  expect_error(w, "3-bit GPTQ is not supported");
  w = gptq_4bit(64, 128, 128);
  w.group_size = 0;
  expect_error(w, "group size must be positive");
}

TEST(QuantizedWeightErrors, GIdxNamingAMissingGroupIsAnError) {
  QuantizedWeight w = gptq_4bit(8, 256, 128);
  w.g_idx.assign(256, 0);
  w.g_idx[200] = 2;  // only groups 0 and 1 exist
  expect_error(w, "g_idx[200] = 2 names no group");
  w.g_idx.resize(100);
  expect_error(w, "g_idx holds 100 elements where 256 are needed");
}

TEST(QuantizedWeightErrors, AwqGroupsThatDoNotDivideInFeaturesAreErrors) {
  QuantizedWeight w;
  w.format = WeightFormat::kAwq;
  w.name = kName;
  w.rows = 16, w.cols = 200, w.bits = 4, w.group_size = 128;
  expect_error(w, "group size 128 does not divide in_features 200");
}

TEST(QuantizedWeightErrors, Fp8ScaleGridsOfTheWrongSizeAreErrors) {
  QuantizedWeight w;
  w.format = WeightFormat::kFp8Block;
  w.name = kName;
  w.rows = 256, w.cols = 200, w.bits = 8, w.block_rows = 128, w.block_cols = 128;
  w.packed.assign(256 * 200, 0);
  w.scales.assign(2, 1.0f);  // needs 2 x 2
  expect_error(w, "holds 2 elements where 4 are needed");
  w.scales.assign(4, 1.0f);
  w.packed.resize(100);
  expect_error(w, "e4m3 weight");
  w.packed.assign(256 * 200, 0);
  w.block_cols = 0;
  expect_error(w, "block size");
}

TEST(QuantizedWeightErrors, ShapesAndRowRangesOutsideTheWeightAreErrors) {
  QuantizedWeight w = gptq_4bit(64, 128, 128);
  w.rows = -64;
  expect_error(w, "shape must be positive");
  w = gptq_4bit(64, 128, 128);
  std::vector<float> out(64 * 128);
  const Status s = dequantize_rows(w, 10, 65, out.data());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rows [10, 65) are outside"), std::string::npos) << s.message();
}

TEST(QuantizedWeightErrors, QuantizingNonFiniteValuesOrUnmadeFormatsIsAnError) {
  std::vector<float> x(16, 0.1f);
  x[9] = NAN;
  auto q = quantize(WeightFormat::kInt8, kName, x.data(), 2, 8);
  ASSERT_FALSE(q.is_ok());
  EXPECT_NE(
      q.status().message().find(std::string(kName) + ": cannot quantize the non-finite value"),
      std::string::npos);
  EXPECT_NE(q.status().message().find("[1, 1]"), std::string::npos) << q.status().message();
  x[9] = 0.1f;
  auto g = quantize(WeightFormat::kGptq, kName, x.data(), 2, 8);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("does not make them"), std::string::npos);
  auto zero_group = quantize(WeightFormat::kInt4, kName, x.data(), 2, 8, {.group_size = 0});
  ASSERT_FALSE(zero_group.is_ok());
}

}  // namespace
}  // namespace cohort::models::quant
