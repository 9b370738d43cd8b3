// The FP8 projections' GPU side: the activation quantizer (fp8_rows.cuh)
// equal to its CPU reference code for code and scale for scale, and
// cuBLASLt's block-scaled e4m3 GEMM as TunedGemm::run_fp8 drives it
// (models/decode/cuda_tuned_gemm.h) against sums in double over the values
// the codes stand for: every 128 x 128 weight tile and every (row, 128
// columns) activation block with a scale of its own, block rows whose
// padding cuBLASLt must skip (384 columns: 3 blocks in a row of 4), store
// and accumulate. Then the whole path from bf16 activations within e4m3's
// rounding of the exact product, and the SwiGLU and norm passes that code
// their output equal to the two kernels each replaces. Skips with a message where no GPU is
// visible, or where cuBLASLt has no block-scaled e4m3 GEMM (before Hopper).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "base/half_float.h"
#include "models/decode/cuda_tuned_gemm.h"
#include "models/ops/fp8_rows.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/swiglu.h"
#include "models/quant/fp8_e4m3.h"
#include "tests/models/cuda_backend_test.h"

namespace cohort::models {
namespace {

using decode::TunedGemm;

// Codes of random values up to 300 in magnitude (no NaN pattern).
std::vector<uint8_t> random_codes(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  std::vector<uint8_t> codes(n);
  for (auto& c : codes) c = quant::float_to_e4m3(u(rng));
  return codes;
}

std::vector<Bf16Bits> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<Bf16Bits> x(n);
  for (auto& v : x) v = float_to_bf16_bits(g(rng));
  return x;
}

class Fp8Gemm : public testing::CudaBackendTest, public ::testing::WithParamInterface<std::tuple<int, int, int>> {
 protected:
  Fp8Gemm() : CudaBackendTest("FP8 GEMM tests") {}
  void SetUp() override {
    CudaBackendTest::SetUp();
    if (IsSkipped()) return;
    stream_ = static_cast<cudaStream_t>(gpu_->stream());
    workspace_ = gpu_->alloc(kWorkspace);
    auto lt = TunedGemm::create(stream_, workspace_, kWorkspace);
    ASSERT_TRUE(lt.is_ok()) << lt.status().message();
    lt_ = std::move(*lt);
    if (!lt_->fp8_supported(16, 128, 128)) GTEST_SKIP() << "cuBLASLt has no block-scaled e4m3 GEMM on this GPU";
  }
  // A device buffer's bytes, for comparisons bit for bit.
  std::vector<uint8_t> bytes(const void* p, size_t count) {
    std::vector<uint8_t> v(count);
    gpu_->copy_to_host(v.data(), p, count);
    return v;
  }
  // bf16 rows [n, cols] and their e4m3 codes [n_pad, cols] and scales
  // [cols / 128, n_pad], on the device.
  struct CodedRows {
    Bf16Bits* values;
    uint8_t* codes;
    float* scales;
  };
  CodedRows coded_rows(int n, int n_pad, int cols) {
    return {static_cast<Bf16Bits*>(gpu_->alloc(size_t(n) * cols * 2)),
            static_cast<uint8_t*>(gpu_->alloc(size_t(n_pad) * cols)),
            static_cast<float*>(gpu_->alloc(size_t(n_pad) * (cols / 128) * 4))};
  }
  void expect_same(const CodedRows& got, const CodedRows& want, int n, int n_pad, int cols) {
    EXPECT_EQ(bytes(got.values, size_t(n) * cols * 2), bytes(want.values, size_t(n) * cols * 2));
    EXPECT_EQ(bytes(got.codes, size_t(n_pad) * cols), bytes(want.codes, size_t(n_pad) * cols));
    EXPECT_EQ(bytes(got.scales, size_t(n_pad) * (cols / 128) * 4), bytes(want.scales, size_t(n_pad) * (cols / 128) * 4));
  }
  static constexpr size_t kWorkspace = size_t{32} << 20;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  std::unique_ptr<TunedGemm> lt_;
};

TEST_P(Fp8Gemm, TheKernelQuantizesRowsAsTheReferenceDoes) {
  const auto [n_pad, in, out] = GetParam();
  (void)out;
  std::mt19937 rng(n_pad * 7 + in);
  const int n = n_pad - 3;  // padded rows too
  std::vector<Bf16Bits> x = random_bf16(size_t(n) * in, 1.0f, rng);
  for (int c = 0; c < 128; ++c) x[size_t(c)] = float_to_bf16_bits(1e-4f * float(c));  // a small block
  for (int c = 128; c < 256 && in >= 256; ++c) x[size_t(c)] = 0;                      // a zero block
  std::vector<uint8_t> want_codes(size_t(n_pad) * in);
  std::vector<float> want_scales(size_t(n_pad) * (in / 128));
  cpu::quantize_rows_e4m3(want_codes.data(), want_scales.data(), x.data(), n, n_pad, in);
  auto* codes = static_cast<uint8_t*>(gpu_->alloc(want_codes.size()));
  auto* scales = static_cast<float*>(gpu_->alloc(want_scales.size() * 4));
  cuda::quantize_rows_e4m3(codes, scales, up(x), n, n_pad, in, static_cast<CUstream_st*>(gpu_->stream()));
  std::vector<uint8_t> got_codes(want_codes.size());
  gpu_->copy_to_host(got_codes.data(), codes, got_codes.size());
  EXPECT_EQ(down(scales, want_scales.size()), want_scales);
  size_t differ = 0;
  for (size_t i = 0; i < got_codes.size(); ++i) differ += got_codes[i] != want_codes[i];
  EXPECT_EQ(differ, 0u) << "of " << got_codes.size() << " codes";
}

// The SwiGLU pass that also codes its output (the FP8 down projection's
// input): h, codes and scales equal to swiglu_bf16 then quantize_rows_e4m3.
TEST_P(Fp8Gemm, TheSwigluPassCodesItsOutputAsTheQuantizerDoes) {
  const auto [n_pad, in, out] = GetParam();
  (void)out;
  const int n = n_pad - 3, I = in;
  std::mt19937 rng(n_pad * 11 + in);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> gate_up(size_t(n) * 2 * I);
  for (auto& v : gate_up) v = g(rng);
  auto* stream = static_cast<CUstream_st*>(gpu_->stream());
  const float* d_gate_up = up(gate_up);
  const CodedRows want = coded_rows(n, n_pad, I), got = coded_rows(n, n_pad, I);
  cuda::swiglu_bf16(d_gate_up, want.values, n, I, stream);
  cuda::quantize_rows_e4m3(want.codes, want.scales, want.values, n, n_pad, I, stream);
  cuda::swiglu_rows_e4m3(got.values, got.codes, got.scales, d_gate_up, n, n_pad, I, stream);
  expect_same(got, want, n, n_pad, I);
}

// The residual add + norm that codes its output (the FP8 qkv and gate/up
// projections' input): x, out, codes and scales equal to add_rmsnorm_bf16
// then quantize_rows_e4m3, in both of its kernels (a warp a row at 32 rows
// or more and widths of 512 to 2,048, a block a row otherwise).
TEST_P(Fp8Gemm, TheNormCodesItsOutputAsTheQuantizerDoes) {
  const auto [n_pad, in, out] = GetParam();
  (void)out;
  const int n = n_pad - 3, hidden = in;
  ASSERT_TRUE(cuda::add_rmsnorm_e4m3_supported(hidden));
  std::mt19937 rng(n_pad * 13 + in);
  std::normal_distribution<float> g(0.0f, 1.5f);
  std::vector<float> x(size_t(n) * hidden), delta(x.size()), w(static_cast<size_t>(hidden));
  for (auto& v : x) v = g(rng);
  for (auto& v : delta) v = g(rng);
  for (auto& v : w) v = 1.0f + 0.1f * g(rng);
  auto* stream = static_cast<CUstream_st*>(gpu_->stream());
  float* want_x = up(x);
  float* got_x = up(x);
  const float* d_delta = up(delta);
  const float* d_w = up(w);
  const CodedRows want = coded_rows(n, n_pad, hidden), got = coded_rows(n, n_pad, hidden);
  cuda::add_rmsnorm_bf16(want_x, d_delta, d_w, want.values, n, hidden, 1e-6f, stream);
  cuda::quantize_rows_e4m3(want.codes, want.scales, want.values, n, n_pad, hidden, stream);
  cuda::add_rmsnorm_e4m3(got_x, d_delta, d_w, got.values, got.codes, got.scales, n, n_pad, hidden, 1e-6f, stream);
  EXPECT_EQ(bytes(got_x, x.size() * 4), bytes(want_x, x.size() * 4));
  expect_same(got, want, n, n_pad, hidden);
}

TEST_P(Fp8Gemm, BlockScaledProductsMatchSumsOverTheCodesValues) {
  const auto [n, in, out] = GetParam();
  std::mt19937 rng(n * 131 + in + out);
  const int kb = in / 128, stride = TunedGemm::fp8_scale_stride(in);
  const std::vector<uint8_t> w = random_codes(size_t(out) * in, rng), x = random_codes(size_t(n) * in, rng);
  std::uniform_real_distribution<float> scale(0.25f, 4.0f);
  std::vector<float> w_scales(size_t(out / 128) * stride, 0.0f), x_scales(size_t(kb) * n);
  for (int bo = 0; bo < out / 128; ++bo)
    for (int b = 0; b < kb; ++b) w_scales[size_t(bo) * stride + b] = 1e-3f * scale(rng);
  for (auto& s : x_scales) s = 1e-2f * scale(rng);
  std::vector<double> want(size_t(n) * out), bound(size_t(n) * out);
  for (int r = 0; r < n; ++r) {
    for (int o = 0; o < out; ++o) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < in; ++k) {
        const double a = double(quant::e4m3_to_float(x[size_t(r) * in + k])) * x_scales[size_t(k / 128) * n + r];
        const double b =
            double(quant::e4m3_to_float(w[size_t(o) * in + k])) * w_scales[size_t(o / 128) * stride + k / 128];
        sum += a * b, magnitude += std::fabs(a * b);
      }
      // Hopper's FP8 MMA keeps about 14 bits of its running sum within a
      // 128-column block (cuBLASLt adds the blocks, scaled, in fp32):
      // errors of a few 1e-5 of the terms' magnitudes; a wrong tile's scale
      // or a misread layout is off by its whole size.
      want[size_t(r) * out + o] = sum, bound[size_t(r) * out + o] = 3e-4 * magnitude + 1e-6;
    }
  }
  TunedGemm::Fp8Operands operands;
  operands.x = up(x), operands.x_scales = up(x_scales), operands.w = up(w), operands.w_scales = up(w_scales);
  std::vector<float> start(size_t(n) * out);
  for (size_t i = 0; i < start.size(); ++i) start[i] = float(i % 7) - 3.0f;
  float* y = up(start);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "y += x · Wᵀ" : "y = x · Wᵀ");
    if (accumulate) gpu_->copy_from_host(y, start.data(), start.size() * 4);
    const Status s = lt_->run_fp8(y, operands, n, in, out, accumulate);
    ASSERT_TRUE(s.is_ok()) << s.message();
    const std::vector<float> got = down(y, start.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double expect = want[i] + (accumulate ? start[i] : 0.0);
      if (std::fabs(got[i] - expect) > bound[i] + (accumulate ? 1e-6 * std::fabs(start[i]) : 0.0)) {
        if (++bad <= 5) ADD_FAILURE() << "element " << i << ": " << got[i] << " against " << expect;
      }
    }
    EXPECT_EQ(bad, 0u);
  }
}

TEST_P(Fp8Gemm, FromBf16RowsTheProductIsWithinE4m3sRounding) {
  const auto [n_pad, in, out] = GetParam();
  std::mt19937 rng(n_pad + 17 * in);
  const int n = n_pad - 2, stride = TunedGemm::fp8_scale_stride(in);
  const std::vector<Bf16Bits> x = random_bf16(size_t(n) * in, 0.5f, rng);
  const std::vector<uint8_t> w = random_codes(size_t(out) * in, rng);
  std::vector<float> w_scales(size_t(out / 128) * stride, 0.0f);
  for (int bo = 0; bo < out / 128; ++bo)
    for (int b = 0; b < in / 128; ++b) w_scales[size_t(bo) * stride + b] = 1e-3f * float(1 + (bo + b) % 5);
  auto* codes = static_cast<uint8_t*>(gpu_->alloc(size_t(n_pad) * in));
  auto* scales = static_cast<float*>(gpu_->alloc(size_t(n_pad) * (in / 128) * 4));
  cuda::quantize_rows_e4m3(codes, scales, up(x), n, n_pad, in, static_cast<CUstream_st*>(gpu_->stream()));
  TunedGemm::Fp8Operands operands;
  operands.x = codes, operands.x_scales = scales, operands.w = up(w), operands.w_scales = up(w_scales);
  float* y = static_cast<float*>(gpu_->alloc(size_t(n_pad) * out * 4));
  ASSERT_TRUE(lt_->run_fp8(y, operands, n_pad, in, out, false).is_ok());
  const std::vector<float> got = down(y, size_t(n_pad) * out);
  double err = 0, norm = 0;
  for (int r = 0; r < n_pad; ++r) {
    for (int o = 0; o < out; ++o) {
      double exact = 0;
      for (int k = 0; r < n && k < in; ++k) {
        exact += double(bf16_bits_to_float(x[size_t(r) * in + k])) * quant::e4m3_to_float(w[size_t(o) * in + k]) *
                 w_scales[size_t(o / 128) * stride + k / 128];
      }
      const double g = got[size_t(r) * out + o];
      if (r >= n) {
        EXPECT_EQ(g, 0.0) << "padded row " << r;
      }
      err += (g - exact) * (g - exact), norm += exact * exact;
    }
  }
  // Each activation rounded to 3 mantissa bits (relative error up to 1/16,
  // about 1/32 on average and independent): the product's error is a few
  // percent of its norm.
  EXPECT_LT(std::sqrt(err / norm), 0.04);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8Gemm,
                         ::testing::Values(std::make_tuple(12, 384, 256), std::make_tuple(16, 512, 384),
                                           std::make_tuple(64, 1024, 640), std::make_tuple(256, 384, 512)));

}  // namespace
}  // namespace cohort::models
