// Mixed-precision pieces of the model library: the dynamic loss scaler's
// policy, the CPU backend's emulation of half-precision GEMM operands
// (rounding, and fp16's overflow), and the backend casts.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "models/backend.h"
#include "models/loss_scaler.h"
#include "models/ops/linear.h"
#include "models/tensor.h"

namespace cohort::models {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheWindow) {
  LossScalerOptions o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  auto scaler = LossScaler::create(o);
  ASSERT_TRUE(scaler.is_ok());
  EXPECT_FALSE(scaler->update(false));  // skipped
  EXPECT_EQ(scaler->scale(), 512);
  EXPECT_TRUE(scaler->update(true));
  EXPECT_TRUE(scaler->update(true));
  EXPECT_EQ(scaler->scale(), 512);
  EXPECT_TRUE(scaler->update(true));  // third finite step in a row
  EXPECT_EQ(scaler->scale(), 1024);
  EXPECT_EQ(scaler->state().finite_steps, 0);
  EXPECT_TRUE(scaler->update(true));
  EXPECT_FALSE(scaler->update(false));  // an overflow restarts the window
  EXPECT_EQ(scaler->scale(), 512);
  EXPECT_EQ(scaler->state().finite_steps, 0);
}

TEST(LossScaler, NeverFallsBelowTheMinimum) {
  LossScalerOptions o;
  o.initial_scale = 1;
  auto scaler = LossScaler::create(o);
  ASSERT_TRUE(scaler.is_ok());
  for (int i = 0; i < 100; ++i) scaler->update(false);
  EXPECT_EQ(scaler->scale(), o.min_scale);
}

TEST(LossScaler, RestoresStateAndRefusesNonsense) {
  auto scaler = LossScaler::create({});
  ASSERT_TRUE(scaler.is_ok());
  ASSERT_TRUE(scaler->restore({256.0, 7}).is_ok());
  EXPECT_EQ(scaler->scale(), 256.0);
  EXPECT_EQ(scaler->state().finite_steps, 7);
  EXPECT_FALSE(scaler->restore({0.0, 0}).is_ok());
  EXPECT_FALSE(scaler->restore({NAN, 0}).is_ok());
  LossScalerOptions bad;
  bad.initial_scale = -1;
  auto refused = LossScaler::create(bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("initial loss scale"), std::string::npos);
  bad = {};
  bad.growth_interval = 0;
  EXPECT_FALSE(LossScaler::create(bad).is_ok());
}

float round_to(MatmulPrecision p, float v) {
  if (p == MatmulPrecision::kBf16) return bf16_to_f32(f32_to_bf16(v));
  if (p == MatmulPrecision::kFp16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// y = x W^T on the CPU backend equals the fp32 GEMM of rounded operands.
TEST(CpuMatmulPrecision, LinearRoundsOperandsLikeTensorCores) {
  auto backend = make_cpu_backend();
  EXPECT_EQ(backend->matmul_precision(), MatmulPrecision::kFp32);
  const int n = 3, in = 5, out = 4;
  std::vector<float> x(n * in), w(out * in);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f + 1.0001f * float(i) / 7.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = -0.3f + 1.0003f * float(i) / 11.0f;
  for (auto p : {MatmulPrecision::kFp32, MatmulPrecision::kBf16, MatmulPrecision::kFp16}) {
    backend->set_matmul_precision(p);
    std::vector<float> y(n * out), want(n * out), xr(x), wr(w);
    for (auto& v : xr) v = round_to(p, v);
    for (auto& v : wr) v = round_to(p, v);
    backend->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out);
    cpu::linear_forward(want.data(), xr.data(), wr.data(), nullptr, n, in, out);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], want[i]) << matmul_precision_name(p) << " " << i;
  }
  // The rounding is visible: bf16 and fp32 results differ.
  std::vector<float> y32(n * out), y16(n * out);
  backend->set_matmul_precision(MatmulPrecision::kFp32);
  backend->linear_forward(y32.data(), x.data(), w.data(), nullptr, n, in, out);
  backend->set_matmul_precision(MatmulPrecision::kBf16);
  backend->linear_forward(y16.data(), x.data(), w.data(), nullptr, n, in, out);
  EXPECT_NE(y32, y16);
}

// What loss scaling exists for: fp16 operands overflow above 65504 and
// underflow below its smallest subnormal (about 6e-8).
TEST(CpuMatmulPrecision, Fp16OverflowsAndUnderflows) {
  auto backend = make_cpu_backend();
  backend->set_matmul_precision(MatmulPrecision::kFp16);
  float w = 1.0f, y = 0, dx = 0, dw = 0;
  float big = 70000.0f;
  backend->linear_forward(&y, &big, &w, nullptr, 1, 1, 1);
  EXPECT_TRUE(std::isinf(y));
  float tiny_grad = 1e-8f, x = 1.0f;
  backend->linear_backward(&dx, &dw, nullptr, &tiny_grad, &x, &w, 1, 1, 1);
  EXPECT_EQ(dx, 0.0f);
  EXPECT_EQ(dw, 0.0f);
  float scaled_grad = 1e-8f * 65536.0f;  // the same gradient under a loss scale of 2^16
  backend->linear_backward(&dx, &dw, nullptr, &scaled_grad, &x, &w, 1, 1, 1);
  EXPECT_NEAR(dx / 65536.0f, 1e-8f, 1e-11f);
}

// Registered working weights are what the linear layers read; AdamW keeps
// them current; a weight outside every registered range is rounded at use.
TEST(CpuWorkingWeights, ServeTheGemmsAndFollowAdamW) {
  auto backend = make_cpu_backend();
  backend->set_matmul_precision(MatmulPrecision::kFp16);
  const int n = 2, in = 3, out = 2;
  std::vector<float> x = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<float> w = {1.0001f, -2.0002f, 3.0003f, 0.25f, 0.5f, 0.75f};
  auto forward = [&] {
    std::vector<float> y(n * out);
    backend->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out);
    return y;
  };
  auto rounded_at_use = forward();
  std::vector<uint16_t> working(w.size());
  backend->set_working_weights(w.data(), working.data(), w.size(), DType::kF16);
  EXPECT_EQ(working[0], f32_to_f16(w[0]));
  EXPECT_EQ(forward(), rounded_at_use);
  std::fill(working.begin(), working.end(), 0);  // stale on purpose: the GEMM must read it
  EXPECT_EQ(forward(), std::vector<float>(n * out, 0.0f));
  backend->refresh_working_weights(w.data() + 2, 4);  // a part of the range
  EXPECT_EQ(working[1], 0);
  EXPECT_EQ(working[2], f32_to_f16(w[2]));
  std::vector<float> g(w.size(), 0.5f), m(w.size()), v(w.size());
  backend->adamw_update(w.data(), g.data(), m.data(), v.data(), w.size(), AdamWConfig{}, 1, false);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(working[i], f32_to_f16(w[i])) << i;
  backend->clear_working_weights(w.data());
  std::fill(working.begin(), working.end(), 0);
  EXPECT_NE(forward(), std::vector<float>(n * out, 0.0f));
}

TEST(BackendCasts, RoundTripThroughHalfTypes) {
  auto backend = make_cpu_backend();
  std::vector<float> src = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, 1e5f};
  for (DType half : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> h(src.size());
    std::vector<float> back(src.size());
    backend->cast_to_half(h.data(), half, src.data(), src.size());
    backend->cast_from_half(back.data(), h.data(), half, src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      float want = half == DType::kBF16 ? bf16_to_f32(f32_to_bf16(src[i])) : f16_to_f32(f32_to_f16(src[i]));
      EXPECT_EQ(back[i], want) << dtype_name(half) << " " << src[i];
    }
  }
}

}  // namespace
}  // namespace cohort::models
