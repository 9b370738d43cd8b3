// The fused training blocks' kernels (models/ops/train_bf16.cuh, and the
// flash attention on their bf16 layout) one at a time against fp32 CPU references (models/ops/*.h, or the formula in
// double where no op exists), on fresh random inputs: forward and backward,
// norm-relative error within 1e-2, and every output element written (each
// output starts as NaN). Launch shapes are the engine's
// (models/cuda/train_blocks.cu). Skips with a message where no GPU is visible.
//
// A CUDA source of its own: it includes the kernels, so it links none of
// cohort_models' CUDA objects (only the CPU references).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/ops/attention.h"
#include "models/ops/flash_attention.cuh"
#include "models/ops/rmsnorm.h"
#include "models/ops/swiglu.h"
#include "models/ops/train_bf16.cuh"
#include "models/tensor.h"
#include "tests/models/attention_case.h"
#include "tests/models/gpu_buffers.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using cuda::train::bf16;

using testing::norm_relative;
using testing::rounded;

class TrainKernels : public ::testing::Test, public testing::GpuBuffers {
 public:  // the device helpers serve qk_norm_rope_case too
  void SetUp() override {
    if (!testing::gpu_visible()) GTEST_SKIP() << "no CUDA device visible: the kernel tests run on the GPU machine";
  }
};

constexpr double kTol = 1e-2;

TEST_F(TrainKernels, AddRmsNormAndItsBackward) {
  const int n = 37, dim = 1032;
  const float eps = 1e-6f;
  const auto a = testing::random_vector(size_t(n) * dim, 1), delta = rounded(testing::random_vector(size_t(n) * dim, 2));
  const auto w = testing::random_vector(dim, 3), dout = rounded(testing::random_vector(size_t(n) * dim, 4));
  const auto dx0 = testing::random_vector(size_t(n) * dim, 5), dw0 = testing::random_vector(dim, 6);
  std::vector<float> x(a.size()), xn(a.size()), rstd(n), dx = dx0, dw = dw0;
  for (size_t i = 0; i < x.size(); ++i) x[i] = a[i] + delta[i];
  cpu::rmsnorm_forward(xn.data(), rstd.data(), x.data(), w.data(), n, dim, eps);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), n, dim);

  float *ga = f32(a), *gw = f32(w), *gx = alloc<float>(x.size()), *gr = alloc<float>(n);
  bf16 *gd = half(delta), *gxn = alloc<bf16>(x.size());
  cuda::train::add_rmsnorm_kernel<128><<<n, 128>>>(gx, gxn, gr, ga, gd, gw, dim, eps);
  EXPECT_LT(norm_relative(x, down(gx, x.size())), 1e-6);
  EXPECT_LT(norm_relative(xn, down(gxn, x.size())), kTol);
  EXPECT_LT(norm_relative(rstd, down(gr, n)), 1e-5);

  float *gdx = f32(dx0), *gdw = f32(dw0);
  bf16 *gdo = half(dout), *gdx_half = alloc<bf16>(x.size());
  cuda::train::rmsnorm_backward_kernel<128><<<n, 128>>>(gdx, gdx_half, gdo, gx, gw, gr, dim);
  cuda::train::rmsnorm_weight_grad_kernel<<<dim3((dim + 31) / 32, 3), dim3(32, 8)>>>(gdw, gdo, gx, gr, n, dim, 13);
  EXPECT_LT(norm_relative(dx, down(gdx, dx.size())), 1e-4);
  EXPECT_LT(norm_relative(dx, down(gdx_half, dx.size())), kTol);
  EXPECT_LT(norm_relative(dw, down(gdw, dim)), 1e-4);
}

// q and k heads normed (or not) and rotated; v heads copied; and back.
void qk_norm_rope_case(TrainKernels* t, int D, bool norm) {
  SCOPED_TRACE("head_dim " + std::to_string(D) + (norm ? ", per-head norms" : ", RoPE only"));
  const int n = 45, hq = 4, hkv = 2, ld = (hq + 2 * hkv) * D, half = D / 2, max_pos = 64;
  const float eps = 1e-6f;
  const auto qkv = rounded(testing::random_vector(size_t(n) * ld, 11));
  const auto qn = testing::random_vector(D, 12), kn = testing::random_vector(D, 13);
  const auto dq0 = rounded(testing::random_vector(size_t(n) * ld, 14));
  std::vector<float> cos(max_pos * half), sin(max_pos * half);
  for (int p = 0; p < max_pos; ++p) {
    for (int i = 0; i < half; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / D);
      cos[p * half + i] = float(std::cos(angle)), sin[p * half + i] = float(std::sin(angle));
    }
  }
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = (i * 7 + 3) % max_pos;
  // Reference: per head, norm (cpu::rmsnorm_forward) then rotate.
  std::vector<float> want(qkv.size()), rq(size_t(n) * hq), rk(size_t(n) * hkv);
  std::vector<float> dwant = dq0, dqn(D, 0.f), dkn(D, 0.f);
  for (int tok = 0; tok < n; ++tok) {
    for (int h = 0; h < hq + 2 * hkv; ++h) {
      const size_t at = size_t(tok) * ld + size_t(h) * D;
      if (h >= hq + hkv) {
        std::copy(qkv.begin() + at, qkv.begin() + at + D, want.begin() + at);
        continue;
      }
      const bool is_q = h < hq;
      std::vector<float> x(qkv.begin() + at, qkv.begin() + at + D), y(D);
      float r = 1.0f;
      if (norm) cpu::rmsnorm_forward(y.data(), &r, x.data(), is_q ? qn.data() : kn.data(), 1, D, eps);
      else y = x;
      if (norm) (is_q ? rq[size_t(tok) * hq + h] : rk[size_t(tok) * hkv + h - hq]) = r;
      const float* c = &cos[pos[tok] * half];
      const float* s = &sin[pos[tok] * half];
      std::vector<float> g(D);  // the gradient back through the rotation, then the norm
      for (int i = 0; i < half; ++i) {
        want[at + i] = y[i] * c[i] - y[i + half] * s[i];
        want[at + i + half] = y[i + half] * c[i] + y[i] * s[i];
        g[i] = dq0[at + i] * c[i] + dq0[at + i + half] * s[i];
        g[i + half] = dq0[at + i + half] * c[i] - dq0[at + i] * s[i];
      }
      if (norm) {
        std::vector<float> dx(D, 0.f);
        cpu::rmsnorm_backward(dx.data(), is_q ? dqn.data() : dkn.data(), g.data(), x.data(),
                              is_q ? qn.data() : kn.data(), &r, 1, D);
        std::copy(dx.begin(), dx.end(), dwant.begin() + at);
      } else {
        std::copy(g.begin(), g.end(), dwant.begin() + at);
      }
    }
  }
  bf16 *gqkv = t->half(qkv), *grot = t->alloc<bf16>(qkv.size());
  float *gqn = t->f32(qn), *gkn = t->f32(kn), *grq = t->alloc<float>(rq.size()), *grk = t->alloc<float>(rk.size());
  float *gcos = t->f32(cos), *gsin = t->f32(sin);
  int32_t* gpos = t->alloc<int32_t>(n);
  cudaMemcpy(gpos, pos.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice);
  const cuda::train::QkvShape qs{hq, hkv, D, ld, eps};
  const float* qnp = norm ? gqn : nullptr;
  const float* knp = norm ? gkn : nullptr;
  if (D == 64) {
    cuda::train::qk_norm_rope_kernel<64><<<7, 256>>>(grot, grq, grk, gqkv, qnp, knp, gpos, gcos, gsin, n, qs);
  } else {
    cuda::train::qk_norm_rope_kernel<128><<<7, 256>>>(grot, grq, grk, gqkv, qnp, knp, gpos, gcos, gsin, n, qs);
  }
  EXPECT_LT(norm_relative(want, t->down(grot, want.size())), kTol);
  if (norm) {
    EXPECT_LT(norm_relative(rq, t->down(grq, rq.size())), 1e-5);
    EXPECT_LT(norm_relative(rk, t->down(grk, rk.size())), 1e-5);
  }
  bf16* gd = t->half(dq0);
  float *gdqn = t->f32(std::vector<float>(D, 0.f)), *gdkn = t->f32(std::vector<float>(D, 0.f));
  if (D == 64) {
    cuda::train::qk_norm_rope_backward_kernel<64><<<5, 256>>>(gd, gdqn, gdkn, gqkv, grq, grk, qnp, knp, gpos, gcos, gsin, n, qs);
  } else {
    cuda::train::qk_norm_rope_backward_kernel<128><<<5, 256>>>(gd, gdqn, gdkn, gqkv, grq, grk, qnp, knp, gpos, gcos, gsin, n, qs);
  }
  EXPECT_LT(norm_relative(dwant, t->down(gd, dwant.size())), kTol);
  if (norm) {
    EXPECT_LT(norm_relative(dqn, t->down(gdqn, D)), 1e-4);
    EXPECT_LT(norm_relative(dkn, t->down(gdkn, D)), 1e-4);
  }
}

TEST_F(TrainKernels, PerHeadNormAndRopeForwardAndBackward) {
  for (int D : {64, 128}) {
    for (bool norm : {true, false}) qk_norm_rope_case(this, D, norm);
  }
}

TEST_F(TrainKernels, SwiGluForwardAndBackward) {
  const int n = 29, I = 264;
  const auto gu = rounded(testing::random_vector(size_t(n) * 2 * I, 21, 2.0f));
  const auto dh = rounded(testing::random_vector(size_t(n) * I, 22));
  std::vector<float> g(size_t(n) * I), u(g.size()), h(g.size()), dg(g.size(), 0.f), du(g.size(), 0.f);
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < I; ++j) g[size_t(r) * I + j] = gu[size_t(r) * 2 * I + j], u[size_t(r) * I + j] = gu[size_t(r) * 2 * I + I + j];
  }
  cpu::swiglu_forward(h.data(), g.data(), u.data(), g.size());
  cpu::swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), g.size());
  std::vector<float> dgu(gu.size());
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < I; ++j) dgu[size_t(r) * 2 * I + j] = dg[size_t(r) * I + j], dgu[size_t(r) * 2 * I + I + j] = du[size_t(r) * I + j];
  }
  bf16 *ggu = half(gu), *gh = alloc<bf16>(h.size()), *gdh = half(dh), *gdgu = alloc<bf16>(gu.size());
  cuda::train::swiglu_forward_kernel<<<3, 256>>>(gh, ggu, n, I);
  cuda::train::swiglu_backward_kernel<<<3, 256>>>(gdgu, gdh, ggu, n, I);
  EXPECT_LT(norm_relative(h, down(gh, h.size())), kTol);
  EXPECT_LT(norm_relative(dgu, down(gdgu, dgu.size())), kTol);
}

// The flash kernels on the fused blocks' layout: bf16 q|k|v rows of stride
// ld read in place, y [N, heads * D] bf16, gradients written (not added)
// into a bf16 dq|dk|dv of the same stride. Reference: the CPU math
// attention on the same bf16-rounded inputs.
TEST_F(TrainKernels, FlashAttentionOnStridedBf16) {
  ASSERT_EQ((cuda::flash_attention_prepare<bf16, bf16>()), cudaSuccess);
  for (int D : {64, 128}) {
    for (auto [B, T, hq, hkv] : {std::array<int, 4>{2, 200, 4, 2}, std::array<int, 4>{1, 70, 8, 1},
                                 std::array<int, 4>{1, 7, 8, 2}}) {
      testing::AttentionCase c{B, T, hq, hkv, D};
      SCOPED_TRACE(c.name());
      c.make(41 + D);
      const int qd = c.qd(), kvd = c.kvd(), ld = c.ld();
      bf16 *gqkv = half(c.packed()), *gy = alloc<bf16>(c.y.size()), *gdy = half(c.dy);
      bf16* gd = alloc<bf16>(size_t(c.N()) * ld);
      float *gl = alloc<float>(c.lse.size()), *gsum = alloc<float>(c.lse.size());
      const cuda::flash::Shape sh{T, hq, hkv, 1.0f / std::sqrt(float(D)), ld, ld, qd};
      if (D == 64) {
        cuda::flash_forward_launch<64>(nullptr, gy, gl, gqkv, gqkv + qd, gqkv + qd + kvd, B, sh);
        cuda::flash_backward_launch<64>(nullptr, gd, gd + qd, gd + qd + kvd, gsum, gdy, gqkv, gqkv + qd,
                                        gqkv + qd + kvd, gy, gl, B, sh);
      } else {
        cuda::flash_forward_launch<128>(nullptr, gy, gl, gqkv, gqkv + qd, gqkv + qd + kvd, B, sh);
        cuda::flash_backward_launch<128>(nullptr, gd, gd + qd, gd + qd + kvd, gsum, gdy, gqkv, gqkv + qd,
                                         gqkv + qd + kvd, gy, gl, B, sh);
      }
      EXPECT_LT(norm_relative(c.y, down(gy, c.y.size())), kTol);
      EXPECT_LT(norm_relative(c.lse, down(gl, c.lse.size())), 1e-3);
      c.expect_gradients(down(gd, size_t(c.N()) * ld), kTol);
    }
  }
}

// Both row layouts: V a multiple of 8 (16-byte loads) and not; an ignored row.
TEST_F(TrainKernels, CrossEntropyForwardAndBackward) {
  for (int V : {1000, 1003}) {
    SCOPED_TRACE("vocab " + std::to_string(V));
    const int n = 9;
    const float scale = 0.125f;
    const auto logits = rounded(testing::random_vector(size_t(n) * V, 31, 3.0f));
    std::vector<int32_t> targets(n);
    for (int i = 0; i < n; ++i) targets[i] = (i * 97 + 5) % V;
    targets[4] = -100;
    std::vector<float> losses(n), lse(n), grad(logits.size());
    for (int r = 0; r < n; ++r) {
      const float* x = &logits[size_t(r) * V];
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < V; ++j) mx = std::max(mx, double(x[j]));
      for (int j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
      lse[r] = float(mx + std::log(sum));
      const bool ignored = targets[r] < 0;
      losses[r] = ignored ? 0.f : float(lse[r] - x[targets[r]]);
      for (int j = 0; j < V; ++j) {
        grad[size_t(r) * V + j] =
            ignored ? 0.f : float(scale * (std::exp(x[j] - double(lse[r])) - (j == targets[r] ? 1.0 : 0.0)));
      }
    }
    bf16* gl = half(logits);
    float *gloss = alloc<float>(n), *glse = alloc<float>(n);
    int32_t* gt = alloc<int32_t>(n);
    cudaMemcpy(gt, targets.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice);
    cuda::train::cross_entropy_forward_kernel<512><<<n, 512>>>(gloss, glse, gl, gt, V);
    EXPECT_LT(norm_relative(losses, down(gloss, n)), 1e-4);
    EXPECT_LT(norm_relative(lse, down(glse, n)), 1e-5);
    cuda::train::cross_entropy_backward_kernel<512><<<n, 512>>>(gl, glse, gt, V, scale);
    EXPECT_LT(norm_relative(grad, down(gl, grad.size())), kTol);
  }
}

}  // namespace
}  // namespace cohort::models
