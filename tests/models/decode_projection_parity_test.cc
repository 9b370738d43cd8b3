// The bf16 decode engine's projections (models/ops/gemv.h: gemv_bf16 and
// its norm and SwiGLU forms, the tensor-core skinny GEMM) against the CPU
// projection, on fresh random inputs; part of models_decode_ops_parity_test.
// Skips with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/ops/gemv.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/swiglu.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers

// Every row count the decode buckets use, a width that is a whole number of
// the kernel's 256-element strides and one that is not, and an output count
// that does not fill the last block.
TEST_F(DecodeOpsParity, GemvBf16MatchesTheCpuProjectionForEachRowCount) {
  for (int in : {1024, 3072, 136}) {
    const int out = 37;
    const auto w = to_bf16(testing::random_vector(size_t(out) * in, 71 + in));
    for (int n = 1; n <= cuda::kGemvMaxRows; ++n) {
      ASSERT_TRUE(cuda::gemv_supported(n, in));
      const auto x = to_bf16(testing::random_vector(size_t(n) * in, 90 + n));
      std::vector<float> want(size_t(n) * out);
      cpu::gemv_bf16(want.data(), x.data(), w.data(), n, in, out);
      float* y = up(std::vector<float>(want.size(), NAN));
      cuda::gemv_bf16(y, up(x), up(w), n, in, out, stream_);
      EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5) << "n " << n << " in " << in;
    }
  }
  EXPECT_FALSE(cuda::gemv_supported(9, 1024));
  EXPECT_FALSE(cuda::gemv_supported(1, 1020));
}

TEST_F(DecodeOpsParity, GemvAccumulateAddsTheProjectionIntoY) {
  const int in = 1024, out = 300, n = 3;
  const auto w = to_bf16(testing::random_vector(size_t(out) * in, 51));
  const auto x = to_bf16(testing::random_vector(size_t(n) * in, 52));
  const auto y0 = testing::random_vector(size_t(n) * out, 53);
  std::vector<float> want(size_t(n) * out);
  cpu::gemv_bf16(want.data(), x.data(), w.data(), n, in, out);
  for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
  float* y = up(y0);
  cuda::gemv_bf16(y, up(x), up(w), n, in, out, stream_, cuda::GemvOutput::kAccumulate);
  EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
}

// The norm forms against RMSNorm of the residual in fp32 (the kernels keep
// the normalised rows unrounded), then the projection; the residual is
// read, never written; asked for, the normalised rows are written. Widths up to 8,192 (an 8B model's hidden size is
// 4,096).
TEST_F(DecodeOpsParity, GemvNormFormsMatchRmsNormThenTheProjection) {
  const int I = 300, out = 37;
  for (int in : {1024, 136, 4096, 8192}) {
    const auto w = to_bf16(testing::random_vector(size_t(2) * I * in, 61 + in));
    const auto wf = from_bf16(w);
    const auto norm_w = testing::random_vector(in, 62);
    for (int n = 1; n <= cuda::kGemvNormMaxRows; ++n) {
      SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in));
      ASSERT_TRUE(cuda::gemv_norm_supported(n, in));
      const auto residual = testing::random_vector(size_t(n) * in, 63 + n, 3.0f);
      std::vector<float> normed(residual.size());
      cpu::rmsnorm_forward(normed.data(), nullptr, residual.data(), norm_w.data(), n, in, 1e-6f);
      std::vector<float> gate_up(size_t(n) * 2 * I), want_h(size_t(n) * I);
      for (int r = 0; r < n; ++r) {
        for (int o = 0; o < 2 * I; ++o) {
          double dot = 0;
          for (int j = 0; j < in; ++j) dot += double(normed[size_t(r) * in + j]) * wf[size_t(o) * in + j];
          gate_up[size_t(r) * 2 * I + o] = float(dot);
        }
      }
      std::vector<float> want_y(size_t(n) * out);
      for (int r = 0; r < n; ++r) {
        for (int o = 0; o < out; ++o) want_y[size_t(r) * out + o] = gate_up[size_t(r) * 2 * I + o];
      }
      cpu::swiglu_fused(want_h.data(), gate_up.data(), n, I);
      float* r = up(residual);
      float* y = up(std::vector<float>(want_y.size(), NAN));
      uint16_t* h = up(std::vector<uint16_t>(want_h.size(), kBf16NaN));
      const float* g = up(norm_w);
      const uint16_t* gw = up(w);
      cuda::gemv_norm_bf16(y, r, g, 1e-6f, gw, n, in, out, stream_);
      cuda::gemv_norm_swiglu_bf16(h, r, g, 1e-6f, gw, n, in, I, stream_);
      EXPECT_LT(norm_relative(want_y, down(y, want_y.size())), 1e-5);
      EXPECT_LT(norm_relative(want_h, down_bf16(h, want_h.size())), kBf16Tol);
      // The router's form also leaves the normalised rows, every element
      // written (out = 37 warps cover `in` in slices), each within one bf16
      // rounding of the reference.
      uint16_t* xn = up(std::vector<uint16_t>(residual.size(), kBf16NaN));
      float* y2 = up(std::vector<float>(want_y.size(), NAN));
      cuda::gemv_norm_bf16(y2, r, g, 1e-6f, gw, n, in, out, stream_, xn);
      EXPECT_EQ(down(y, want_y.size()), down(y2, want_y.size()));
      const auto got_xn = down_bf16(xn, residual.size());
      for (size_t i = 0; i < normed.size(); ++i) {
        ASSERT_NEAR(got_xn[i], normed[i], std::fabs(normed[i]) / 128 + 1e-6f) << "element " << i;
      }
      EXPECT_EQ(residual, down(r, residual.size()));
    }
  }
  EXPECT_FALSE(cuda::gemv_norm_supported(cuda::kGemvNormMaxRows + 1, 1024));
  EXPECT_FALSE(cuda::gemv_norm_supported(2, 1020));
}

// The tensor-core forms for every tile count the decode buckets use (and
// row counts between them), widths of one and several K chunks per warp,
// output counts that do not fill the last block, each epilogue.
TEST_F(DecodeOpsParity, SkinnyGemmMatchesTheCpuProjection) {
  cuda::SkinnyScratch scratch{gpu_->alloc_floats(cuda::kSkinnyScratchFloats),
                              static_cast<int*>(gpu_->alloc(cuda::kSkinnyScratchTiles * 4))};
  EXPECT_EQ(cuda::skinny_splits(64, 2048), 8);  // a 1,024-row output over 512 blocks
  EXPECT_EQ(cuda::skinny_splits(64, 3072), 4);  // K ranges of whole chunks
  EXPECT_EQ(cuda::skinny_splits(9496, 1024), 1);
  for (int in : {256, 1024, 3072}) {
    for (int out : {40, 1024}) {
      const auto w = to_bf16(testing::random_vector(size_t(out) * in, 81 + in + out));
      for (int n : {1, 5, 8, 9, 16, 24, 33, 48, 64}) {
        for (bool split : {true, false}) {
          SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in) + " out " +
                       std::to_string(out) + (split ? " split" : " unsplit"));
          ASSERT_TRUE(cuda::skinny_gemm_supported(n, in));
          const cuda::SkinnyScratch use = split ? scratch : cuda::SkinnyScratch{};
          const auto x = to_bf16(testing::random_vector(size_t(n) * in, 95 + n));
          const auto y0 = testing::random_vector(size_t(n) * out, 96);
          std::vector<float> want(size_t(n) * out);
          cpu::gemv_bf16(want.data(), x.data(), w.data(), n, in, out);
          float* y = up(std::vector<float>(want.size(), NAN));
          const uint16_t* gx = up(x);
          const uint16_t* gw = up(w);
          cuda::skinny_gemm_bf16(y, gx, gw, n, in, out, use, stream_);
          EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
          for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
          float* acc = up(y0);
          cuda::skinny_gemm_bf16(acc, gx, gw, n, in, out, use, stream_, cuda::GemvOutput::kAccumulate);
          EXPECT_LT(norm_relative(want, down(acc, want.size())), 1e-5) << "accumulating";
        }
      }
    }
  }
  // Every tile's count is back to zero for the next call.
  std::vector<int32_t> arrivals(cuda::kSkinnyScratchTiles, -1);
  gpu_->copy_to_host(arrivals.data(), scratch.arrivals, arrivals.size() * 4);
  EXPECT_EQ(arrivals, std::vector<int32_t>(arrivals.size(), 0));
  EXPECT_FALSE(cuda::skinny_gemm_supported(65, 1024));
  EXPECT_FALSE(cuda::skinny_gemm_supported(8, 1000));
}

// From 9 rows the projections run as staged tiles (tile_gemm.cuh): 64 or 128
// weight rows a block, K split over a cluster of 1 to 8 blocks, the grid
// within 1.5 blocks a multiprocessor (this runs everywhere).
TEST(TileGemmPlans, BlockShapesAndSplitsFollowTheMachine) {
  // Past 32 rows: two 32-row blocks a weight tile, up to 2 blocks a
  // multiprocessor where they take 64 weight rows.
  const cuda::TilePlan o_proj = cuda::tile_plan(64, 2048, 1024, false, 132);
  EXPECT_EQ(o_proj.bn, 64);
  EXPECT_EQ(o_proj.tiles, 16);
  EXPECT_EQ(o_proj.splits, 8);  // 256 blocks
  EXPECT_EQ(o_proj.mt, 1);
  EXPECT_EQ(o_proj.row_blocks, 2);
  const cuda::TilePlan qkv64 = cuda::tile_plan(48, 1024, 4096, false, 132);
  EXPECT_EQ(qkv64.bn, 128);
  EXPECT_EQ(qkv64.splits, 2);  // 128 blocks of 128 weight rows; 4 splits would be 256
  EXPECT_EQ(qkv64.row_blocks, 2);
  EXPECT_EQ(cuda::tile_plan(64, 1024, 3072, true, 132).splits, 2);  // gate/up: 192 blocks
  const cuda::TilePlan gate_up = cuda::tile_plan(16, 1024, 3072, true, 132);
  EXPECT_EQ(gate_up.bn, 128);
  EXPECT_EQ(gate_up.tiles, 48);
  EXPECT_EQ(gate_up.splits, 4);
  EXPECT_EQ(gate_up.mt, 1);
  EXPECT_EQ(cuda::tile_plan(8, 1024, 1024, false, 132).bn, 0);   // the skinny kernel's rows
  EXPECT_EQ(cuda::tile_plan(64, 1000, 1024, false, 132).bn, 0);  // K not whole stages
  EXPECT_EQ(cuda::tile_plan(64, 1024, 40, false, 132).bn, 0);    // no whole block of outputs
  const cuda::TilePlan qkv = cuda::tile_plan(24, 1024, 4096, false, 132);
  EXPECT_EQ(qkv.bn, 128);
  EXPECT_EQ(qkv.splits, 4);  // 128 blocks; 8 splits would be 256
  EXPECT_EQ(cuda::tile_plan(24, 1024, 4096, false, 16).splits, 1);  // a small device
}

// The shapes of the tests above take 64-row blocks; a wide output takes
// 128-row ones.
TEST_F(DecodeOpsParity, TileGemmWideOutputsMatchTheCpuProjection) {
  const int in = 256, out = 4096;
  const auto w = to_bf16(testing::random_vector(size_t(out) * in, 401));
  for (int n : {9, 32, 33, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    ASSERT_EQ(cuda::tile_plan(n, in, out, false, 132).bn, 128);
    const auto x = to_bf16(testing::random_vector(size_t(n) * in, 402 + n));
    std::vector<float> want(size_t(n) * out);
    cpu::gemv_bf16(want.data(), x.data(), w.data(), n, in, out);
    float* y = up(std::vector<float>(want.size(), NAN));
    cuda::skinny_gemm_bf16(y, up(x), up(w), n, in, out, cuda::SkinnyScratch{}, stream_);
    EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
  }
}

TEST_F(DecodeOpsParity, SkinnyGemmSwigluMatchesProjectionThenSwiglu) {
  cuda::SkinnyScratch scratch{gpu_->alloc_floats(cuda::kSkinnyScratchFloats),
                              static_cast<int*>(gpu_->alloc(cuda::kSkinnyScratchTiles * 4))};
  const int in = 1024;
  for (int I : {300, 512, 3072}) {  // the skinny kernel, 64- and 128-row tiles
    const auto w = to_bf16(testing::random_vector(size_t(2) * I * in, 97 + I));
    for (int n : {5, 16, 40, 64}) {
      SCOPED_TRACE("n " + std::to_string(n) + " I " + std::to_string(I));
      const auto x = to_bf16(testing::random_vector(size_t(n) * in, 98 + n));
      std::vector<float> gate_up(size_t(n) * 2 * I), want(size_t(n) * I);
      cpu::gemv_bf16(gate_up.data(), x.data(), w.data(), n, in, 2 * I);
      cpu::swiglu_fused(want.data(), gate_up.data(), n, I);
      uint16_t* h = up(std::vector<uint16_t>(size_t(n) * I, kBf16NaN));
      cuda::skinny_gemm_swiglu_bf16(h, up(x), up(w), n, in, I, scratch, stream_);
      EXPECT_LT(norm_relative(want, down_bf16(h, want.size())), kBf16Tol);
    }
  }
}

// The RMSNorm folded into the tile projections (FoldedNorm, gemv.h): the
// chain's start and a consumer equal RMSNorm then the projection (store and
// SwiGLU); a producer adds into the residual and leaves the next norm's
// input and its chunk sums, which a consumer then takes.
TEST_F(DecodeOpsParity, FoldedNormProjectionsMatchRmsNormThenTheProjection) {
  const int H = 1024, out = 4096, I = 3072;
  const float eps = 1e-6f;
  const auto w = to_bf16(testing::random_vector(size_t(out) * H, 501));
  const auto wgu = to_bf16(testing::random_vector(size_t(2) * I * H, 502));
  const auto wdown = to_bf16(testing::random_vector(size_t(H) * I, 503));
  const auto gamma = testing::random_vector(H, 504), gamma2 = testing::random_vector(H, 505);
  for (int n : {9, 24, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    ASSERT_TRUE(cuda::folded_norm_supported(n, H, out));
    ASSERT_TRUE(cuda::folded_norm_supported(n, H, I, true));
    ASSERT_TRUE(cuda::folded_norm_supported(n, I, H));
    const auto x = testing::random_vector(size_t(n) * H, 506 + n, 3.0f);
    // CPU: the norm, its bf16 copy, then the projections.
    auto normed_bf16 = [&](const std::vector<float>& residual, const std::vector<float>& g) {
      std::vector<float> normed(residual.size());
      cpu::rmsnorm_forward(normed.data(), nullptr, residual.data(), g.data(), n, H, eps);
      return to_bf16(normed);
    };
    std::vector<float> want_y(size_t(n) * out), gate_up(size_t(n) * 2 * I), want_h(size_t(n) * I);
    const auto xn = normed_bf16(x, gamma);
    cpu::gemv_bf16(want_y.data(), xn.data(), w.data(), n, H, out);
    cpu::gemv_bf16(gate_up.data(), xn.data(), wgu.data(), n, H, 2 * I);
    cpu::swiglu_fused(want_h.data(), gate_up.data(), n, I);
    // GPU: the chain's start, then both consumers.
    float* gx = up(x);
    uint16_t* chain_x = up(std::vector<uint16_t>(size_t(n) * H, kBf16NaN));
    float* sumsq = up(std::vector<float>(size_t(n) * H / cuda::kNormChunk, NAN));
    cuda::rms_chunks_bf16(gx, up(gamma), chain_x, sumsq, n, H, stream_);
    cuda::FoldedNorm consume;
    consume.in_sumsq = sumsq, consume.eps = eps;
    float* y = up(std::vector<float>(want_y.size(), NAN));
    uint16_t* h = up(std::vector<uint16_t>(want_h.size(), kBf16NaN));
    cuda::skinny_gemm_bf16(y, chain_x, up(w), n, H, out, cuda::SkinnyScratch{}, stream_,
                           cuda::GemvOutput::kStore, consume);
    cuda::skinny_gemm_swiglu_bf16(h, chain_x, up(wgu), n, H, I, cuda::SkinnyScratch{}, stream_,
                                  consume);
    EXPECT_LT(norm_relative(want_y, down(y, want_y.size())), kBf16Tol);
    EXPECT_LT(norm_relative(want_h, down_bf16(h, want_h.size())), kBf16Tol);
    // A producer: x += h · wdownᵀ, leaving gamma2's input and sums; the
    // consumer after it equals the norm of the new x then the projection.
    const auto h_in = to_bf16(testing::random_vector(size_t(n) * I, 507 + n));
    std::vector<float> delta(size_t(n) * H), want_x(x);
    cpu::gemv_bf16(delta.data(), h_in.data(), wdown.data(), n, I, H);
    for (size_t i = 0; i < want_x.size(); ++i) want_x[i] += delta[i];
    cuda::FoldedNorm produce;
    produce.out_weight = up(gamma2), produce.out_x = chain_x, produce.out_sumsq = sumsq;
    cuda::skinny_gemm_bf16(gx, up(h_in), up(wdown), n, I, H, cuda::SkinnyScratch{}, stream_,
                           cuda::GemvOutput::kAccumulate, produce);
    const auto got_x = down(gx, want_x.size());
    EXPECT_LT(norm_relative(want_x, got_x), 1e-5);
    std::vector<float> want_sums(size_t(n) * H / cuda::kNormChunk, 0.0f), scaled(want_x.size());
    for (size_t i = 0; i < want_x.size(); ++i) {
      want_sums[i / cuda::kNormChunk] += want_x[i] * want_x[i];
      scaled[i] = want_x[i] * gamma2[i % H];
    }
    EXPECT_LT(norm_relative(want_sums, down(sumsq, want_sums.size())), 1e-5);
    EXPECT_LT(norm_relative(scaled, down_bf16(chain_x, scaled.size())), kBf16Tol);
    const auto xn2 = normed_bf16(want_x, gamma2);
    cpu::gemv_bf16(want_y.data(), xn2.data(), w.data(), n, H, out);
    cuda::skinny_gemm_bf16(y, chain_x, up(w), n, H, out, cuda::SkinnyScratch{}, stream_,
                           cuda::GemvOutput::kStore, consume);
    EXPECT_LT(norm_relative(want_y, down(y, want_y.size())), kBf16Tol);
  }
}

TEST_F(DecodeOpsParity, GemvSwigluBf16MatchesProjectionThenSwiglu) {
  const int in = 1024, I = 300;
  const auto w = to_bf16(testing::random_vector(size_t(2) * I * in, 33));
  for (int n : {1, 3, 8}) {
    const auto x = to_bf16(testing::random_vector(size_t(n) * in, 40 + n));
    std::vector<float> gate_up(size_t(n) * 2 * I), want(size_t(n) * I);
    cpu::gemv_bf16(gate_up.data(), x.data(), w.data(), n, in, 2 * I);
    cpu::swiglu_fused(want.data(), gate_up.data(), n, I);
    std::vector<uint16_t> nan_bits(size_t(n) * I, kBf16NaN);
    uint16_t* h = up(nan_bits);
    cuda::gemv_swiglu_bf16(h, up(x), up(w), n, in, I, stream_);
    EXPECT_LT(norm_relative(want, down_bf16(h, want.size())), kBf16Tol) << "n " << n;
  }
}

}  // namespace
}  // namespace cohort::models
