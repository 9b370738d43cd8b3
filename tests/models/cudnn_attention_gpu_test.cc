// cuDNN's fused attention (models/cuda/cudnn_attention.h) on the fused
// blocks' layout against the CPU fp32 reference, forward and backward, on
// fresh random inputs with NaN-filled outputs: head_dim 64 and 128, grouped
// and plain heads, lengths that are and are not multiples of the tiles.
// Its log-sum-exp is checked as tightly as the flash kernels' is
// (train_kernels_gpu_test), which is what lets either backward follow
// either forward. A timing case prints its speed at the training
// benchmark's shapes. Skips with a message where no GPU is visible or the
// cuDNN library does not load.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#include "models/cuda/cudnn_attention.h"
#include "tests/models/attention_case.h"
#include "tests/models/gpu_buffers.h"

namespace cohort::models {
namespace {

using bf16 = testing::GpuBuffers::bf16;
using cuda::CudnnAttention;
using cuda::CudnnAttentionShape;
using testing::AttentionCase;
using testing::norm_relative;

constexpr double kTol = 1e-2;

class CudnnAttentionTest : public ::testing::Test, public testing::GpuBuffers {
 public:
  void SetUp() override {
    if (!testing::gpu_visible()) GTEST_SKIP() << "no CUDA device visible: the cuDNN tests run on the GPU machine";
    auto made = CudnnAttention::create();
    if (!made.is_ok()) GTEST_SKIP() << "cuDNN is not available: " << made.status().message();
    cudnn_ = std::move(made).value();
  }

  static CudnnAttentionShape shape_of(const AttentionCase& c) {
    return {c.B, c.T, c.hq, c.hkv, c.D, c.ld(), c.qd()};
  }
  void* workspace(const CudnnAttentionShape& s) { return alloc<char>(cudnn_->workspace_bytes(s)); }

  std::unique_ptr<CudnnAttention> cudnn_;
};

TEST_F(CudnnAttentionTest, MatchesTheCpuReference) {
  for (int D : {64, 128}) {
    for (auto [B, T, hq, hkv] : {std::array<int, 4>{2, 200, 4, 2}, std::array<int, 4>{1, 70, 8, 1},
                                 std::array<int, 4>{1, 7, 8, 2}, std::array<int, 4>{2, 256, 4, 4}}) {
      AttentionCase c{B, T, hq, hkv, D};
      SCOPED_TRACE(c.name());
      c.make(71 + D + T);
      const CudnnAttentionShape s = shape_of(c);
      const Status prepared = cudnn_->prepare(s);
      ASSERT_TRUE(prepared.is_ok()) << prepared.to_string();
      const int qd = c.qd(), kvd = c.kvd();
      bf16 *qkv = half(c.packed()), *y = alloc<bf16>(c.y.size()), *dy = half(c.dy);
      bf16* d = alloc<bf16>(size_t(c.N()) * c.ld());
      float* lse = alloc<float>(c.lse.size());
      void* ws = workspace(s);
      Status st = cudnn_->forward(nullptr, s, y, lse, qkv, qkv + qd, qkv + qd + kvd, ws);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      EXPECT_LT(norm_relative(c.y, down(y, c.y.size())), kTol);
      EXPECT_LT(norm_relative(c.lse, down(lse, c.lse.size())), 1e-3);
      st = cudnn_->backward(nullptr, s, d, d + qd, d + qd + kvd, dy, qkv, qkv + qd, qkv + qd + kvd, y, lse, ws);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      c.expect_gradients(down(d, size_t(c.N()) * c.ld()), kTol);

    }
  }
  std::printf("%s\n", cudnn_->describe().c_str());
}

// Median milliseconds of `run` over 20 launches after 3 warm-ups.
template <typename F>
double median_ms(F run) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) run();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a);
    run();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + 10, ms.end());
  return ms[10];
}

// Not a speed assertion (those are the benchmarks'): the figures for the
// notes, at the training benchmark's shapes (Qwen3-0.6B: 16/8 heads of 128).
TEST_F(CudnnAttentionTest, TimesAtTheBenchmarkShapes) {
  for (auto [B, T] : {std::array<int, 2>{8, 1024}, std::array<int, 2>{2, 4096}}) {
    AttentionCase c{B, T, 16, 8, 128};
    const CudnnAttentionShape s = shape_of(c);
    const Status prepared = cudnn_->prepare(s);
    ASSERT_TRUE(prepared.is_ok()) << prepared.to_string();
    const int qd = c.qd(), kvd = c.kvd();
    const size_t rows = size_t(c.N()) * c.ld();
    bf16 *qkv = half(testing::random_vector(rows, 5)), *y = alloc<bf16>(size_t(c.N()) * qd);
    bf16 *dy = half(testing::random_vector(size_t(c.N()) * qd, 6)), *d = alloc<bf16>(rows);
    float* lse = alloc<float>(size_t(B) * 16 * T);
    void* ws = workspace(s);
    const double fwd_cudnn = median_ms([&] { (void)cudnn_->forward(nullptr, s, y, lse, qkv, qkv + qd, qkv + qd + kvd, ws); });
    const double bwd_cudnn = median_ms([&] {
      (void)cudnn_->backward(nullptr, s, d, d + qd, d + qd + kvd, dy, qkv, qkv + qd, qkv + qd + kvd, y, lse, ws);
    });
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // Causal forward: 2 products of B*heads*T*T*D/2 multiply-adds; backward 2.5x.
    const double fwd_flop = 4.0 * B * 16 * double(T) * T * 128 / 2;
    std::printf("cuDNN attention B %d T %d (16/8 heads, D 128): forward %.3f ms (%.0f TFLOP/s), backward %.3f ms "
                "(%.0f TFLOP/s)\n",
                B, T, fwd_cudnn, fwd_flop / fwd_cudnn * 1e-9, bwd_cudnn, 2.5 * fwd_flop / bwd_cudnn * 1e-9);
  }
}

}  // namespace
}  // namespace cohort::models
