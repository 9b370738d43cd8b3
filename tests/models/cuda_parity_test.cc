// CPU (fp32 reference) vs CUDA, op by op and for the whole tiny model.
// Tolerances: GEMM-based results use bf16 tensor-core inputs with fp32
// accumulation (ops/linear.cuh), so they are compared by norm-relative error
// below 2e-2; elementwise and reduction kernels run in fp32 and must agree to
// 1e-4. Skips with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "models/cuda_backend.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "models/ops/attention.h"
#include "models/ops/cross_entropy.h"
#include "models/ops/linear.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/rope.h"
#include "models/ops/swiglu.h"
#include "tests/models/cuda_backend_test.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

constexpr double kGemmTol = 2e-2;
constexpr double kFp32Tol = 1e-4;

using testing::norm_relative;

class CudaParity : public testing::CudaBackendTest {
 protected:
  CudaParity() : CudaBackendTest("GPU parity tests") {}
};

TEST_F(CudaParity, RmsNormForwardAndBackward) {
  const int n = 300, dim = 300;  // several row chunks in the weight gradient
  auto x = testing::random_vector(n * dim, 1), w = testing::random_vector(dim, 2);
  auto dout = testing::random_vector(n * dim, 3);
  std::vector<float> out(n * dim), rstd(n), dx(n * dim, 0.5f), dw(dim, 0.5f);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, dim, 1e-6f);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), n, dim);
  float *gx = up(x), *gw = up(w), *gd = up(dout), *go = up(out), *gr = up(rstd);
  float *gdx = up(std::vector<float>(n * dim, 0.5f)), *gdw = up(std::vector<float>(dim, 0.5f));
  gpu_->rmsnorm_forward(go, gr, gx, gw, n, dim, 1e-6f);
  gpu_->rmsnorm_backward(gdx, gdw, gd, gx, gw, gr, n, dim);
  EXPECT_LT(norm_relative(out, down(go, n * dim)), kFp32Tol);
  EXPECT_LT(norm_relative(dx, down(gdx, n * dim)), kFp32Tol);
  EXPECT_LT(norm_relative(dw, down(gdw, dim)), kFp32Tol);
}

// Every matmul precision: the CPU backend's emulation (operands rounded to
// nearest even, fp32 GEMM) and the GPU's linear layers (16-bit operand
// copies rounded the same way, fp32 accumulation) agree up to the order of
// fp32 accumulation — far tighter than the bf16-vs-fp32 tolerance; this is
// what lets CPU runs stand in for GPU fp16 numerics (loss scaling). (cuBLAS's
// own FAST_16BF conversion, used before, rounds differently: 2.3e-3 apart.)
TEST_F(CudaParity, EveryMatmulPrecisionMatchesTheCpuEmulation) {
  const int n = 64, in = 128, out_dim = 96;
  auto x = testing::random_vector(n * in, 11), w = testing::random_vector(out_dim * in, 12);
  auto dy = testing::random_vector(n * out_dim, 13);
  auto cpu = make_cpu_backend();
  for (auto p : {MatmulPrecision::kFp32, MatmulPrecision::kBf16, MatmulPrecision::kFp16}) {
    cpu->set_matmul_precision(p);
    gpu_->set_matmul_precision(p);
    std::vector<float> y(n * out_dim), dx(n * in), dw(out_dim * in);
    cpu->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out_dim);
    cpu->linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out_dim);
    float *gx = up(x), *gw = up(w), *gdy = up(dy), *gy = up(y);
    float *gdx = up(std::vector<float>(n * in)), *gdw = up(std::vector<float>(out_dim * in));
    gpu_->linear_forward(gy, gx, gw, nullptr, n, in, out_dim);
    gpu_->linear_backward(gdx, gdw, nullptr, gdy, gx, gw, n, in, out_dim);
    const char* name = matmul_precision_name(p);
    const double tolerance = 1e-5;
    EXPECT_LT(norm_relative(y, down(gy, y.size())), tolerance) << name;
    EXPECT_LT(norm_relative(dx, down(gdx, dx.size())), tolerance) << name;
    EXPECT_LT(norm_relative(dw, down(gdw, dw.size())), tolerance) << name;
  }
  gpu_->set_matmul_precision(MatmulPrecision::kBf16);
}

// A registered working copy is what the linear layers read (the same values
// a cast at use would give, so the same outputs), and AdamW rewrites it.
TEST_F(CudaParity, WorkingWeightsServeTheGemmsAndFollowAdamW) {
  const int n = 64, in = 128, out_dim = 96;
  auto x = testing::random_vector(n * in, 21), w = testing::random_vector(out_dim * in, 22);
  auto dy = testing::random_vector(n * out_dim, 23), g = testing::random_vector(out_dim * in, 24);
  gpu_->set_matmul_precision(MatmulPrecision::kBf16);
  float *gx = up(x), *gw = up(w), *gdy = up(dy);
  auto run = [&] {
    float *gy = up(std::vector<float>(n * out_dim)), *gdx = up(std::vector<float>(n * in));
    float* gdw = up(std::vector<float>(out_dim * in));
    gpu_->linear_forward(gy, gx, gw, nullptr, n, in, out_dim);
    gpu_->linear_backward(gdx, gdw, nullptr, gdy, gx, gw, n, in, out_dim);
    return std::vector<std::vector<float>>{down(gy, n * out_dim), down(gdx, n * in), down(gdw, out_dim * in)};
  };
  auto cast_at_use = run();
  auto* working = static_cast<uint16_t*>(gpu_->alloc(w.size() * 2));
  gpu_->set_working_weights(gw, working, w.size(), DType::kBF16);
  EXPECT_EQ(run(), cast_at_use);
  // A stale copy would show: the GEMMs must be reading it.
  gpu_->zero(working, w.size() * 2);
  EXPECT_NE(run(), cast_at_use);
  gpu_->refresh_working_weights(gw, w.size());
  EXPECT_EQ(run(), cast_at_use);
  float *gg = up(g), *gm = up(std::vector<float>(w.size())), *gv = up(std::vector<float>(w.size()));
  gpu_->adamw_update(gw, gg, gm, gv, w.size(), AdamWConfig{}, 1, true);
  std::vector<uint16_t> got(w.size()), want(w.size());
  gpu_->copy_to_host(got.data(), working, w.size() * 2);
  auto updated = down(gw, w.size());
  for (size_t i = 0; i < w.size(); ++i) want[i] = f32_to_bf16(updated[i]);
  EXPECT_EQ(got, want);
  gpu_->clear_working_weights(gw);
}

TEST_F(CudaParity, HalfCastsMatchTheCpu) {
  auto x = testing::random_vector(1000, 14);
  x[0] = 70000.0f;  // beyond fp16's range
  auto cpu = make_cpu_backend();
  for (DType half : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> want(x.size()), got(x.size());
    cpu->cast_to_half(want.data(), half, x.data(), x.size());
    float* gx = up(x);
    auto* gh = static_cast<uint16_t*>(gpu_->alloc(x.size() * 2));
    gpu_->cast_to_half(gh, half, gx, x.size());
    gpu_->copy_to_host(got.data(), gh, x.size() * 2);
    EXPECT_EQ(want, got) << dtype_name(half);
    float* back = up(std::vector<float>(x.size()));
    gpu_->cast_from_half(back, gh, half, x.size());
    std::vector<float> want_back(x.size());
    cpu->cast_from_half(want_back.data(), want.data(), half, x.size());
    EXPECT_EQ(want_back, down(back, x.size())) << dtype_name(half);
  }
}

// One kernel for many ranges of very different sizes (some spanning many
// blocks), from f32 and from bf16.
TEST_F(CudaParity, CopyPlansMatchTheCpu) {
  std::vector<CopyRange> ranges = {{0, 5, 3}, {10, 100, 20000}, {20010, 20100, 1}, {30000, 30000, 100000}};
  const size_t size = 140000;
  auto src = testing::random_vector(size, 15);
  std::vector<uint16_t> src_half(size);
  auto cpu = make_cpu_backend();
  cpu->cast_to_half(src_half.data(), DType::kBF16, src.data(), size);
  auto cpu_plan = cpu->make_copy_plan(ranges);
  auto gpu_plan = gpu_->make_copy_plan(ranges);
  float* gsrc = up(src);
  auto* gsrc_half = static_cast<uint16_t*>(gpu_->alloc(size * 2));
  gpu_->copy_from_host(gsrc_half, src_half.data(), size * 2);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<float> want(size, -1.0f);
    const void* host_src = dtype == DType::kF32 ? static_cast<const void*>(src.data()) : src_half.data();
    cpu->run_copy_plan(*cpu_plan, want.data(), host_src, dtype);
    float* gdst = up(std::vector<float>(size, -1.0f));
    gpu_->run_copy_plan(*gpu_plan, gdst, dtype == DType::kF32 ? static_cast<const void*>(gsrc) : gsrc_half, dtype);
    EXPECT_EQ(want, down(gdst, size)) << dtype_name(dtype);
  }
}

TEST_F(CudaParity, LinearWithBiasForwardAndBackward) {
  const int n = 200, in = 96, out_dim = 80;  // several row chunks for the bias
  auto x = testing::random_vector(n * in, 1), w = testing::random_vector(out_dim * in, 2);
  auto b = testing::random_vector(out_dim, 3), dy = testing::random_vector(n * out_dim, 4);
  std::vector<float> y(n * out_dim), dx(n * in), dw(out_dim * in), db(out_dim);
  cpu::linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out_dim);
  cpu::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in,
                       out_dim);
  float *gx = up(x), *gw = up(w), *gb = up(b), *gdy = up(dy), *gy = up(y);
  float *gdx = up(std::vector<float>(n * in)), *gdw = up(std::vector<float>(out_dim * in));
  float* gdb = up(std::vector<float>(out_dim));
  gpu_->linear_forward(gy, gx, gw, gb, n, in, out_dim);
  gpu_->linear_backward(gdx, gdw, gdb, gdy, gx, gw, n, in, out_dim);
  EXPECT_LT(norm_relative(y, down(gy, y.size())), kGemmTol);
  EXPECT_LT(norm_relative(dx, down(gdx, dx.size())), kGemmTol);
  EXPECT_LT(norm_relative(dw, down(gdw, dw.size())), kGemmTol);
  EXPECT_LT(norm_relative(db, down(gdb, db.size())), kFp32Tol);
}

TEST_F(CudaParity, GroupedQueryAttentionForwardBackwardAndDecode) {
  const int B = 2, T = 33, hq = 8, hkv = 2, D = 16;
  auto q = testing::random_vector(B * T * hq * D, 1),
       k = testing::random_vector(B * T * hkv * D, 2);
  auto v = testing::random_vector(B * T * hkv * D, 3), dy = testing::random_vector(q.size(), 4);
  std::vector<float> y(q.size()), lse(B * hq * T), scratch(attention_scratch_floats(T, hq));
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), B, T,
                         hq, hkv, D);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dy.data(), q.data(),
                          k.data(), v.data(), lse.data(), B, T, hq, hkv, D);
  float *gq = up(q), *gk = up(k), *gv = up(v), *gdy = up(dy), *gy = up(y), *gl = up(lse);
  float *gs = up(scratch), *gdq = up(std::vector<float>(q.size()));
  float *gdk = up(std::vector<float>(k.size())), *gdv = up(std::vector<float>(v.size()));
  gpu_->attention_forward(gy, gl, gs, gq, gk, gv, B, T, hq, hkv, D);
  gpu_->attention_backward(gdq, gdk, gdv, gs, gdy, gy, gq, gk, gv, gl, B, T, hq, hkv, D);
  EXPECT_LT(norm_relative(y, down(gy, y.size())), kGemmTol);
  EXPECT_LT(norm_relative(lse, down(gl, lse.size())), kGemmTol);
  EXPECT_LT(norm_relative(dq, down(gdq, dq.size())), kGemmTol);
  EXPECT_LT(norm_relative(dk, down(gdk, dk.size())), kGemmTol);
  EXPECT_LT(norm_relative(dv, down(gdv, dv.size())), kGemmTol);
  // Decode path of batch 0: cache all T keys, attend with the last 3 queries.
  const int cap = 40;
  std::vector<float> kc(hkv * cap * D), vc(kc.size()), yc(3 * hq * D), sc(cap);
  cpu::kv_cache_write(kc.data(), k.data(), T, 0, cap, hkv, D);
  cpu::kv_cache_write(vc.data(), v.data(), T, 0, cap, hkv, D);
  cpu::attention_cached(yc.data(), sc.data(), q.data() + (T - 3) * hq * D, kc.data(), vc.data(), 3,
                        T - 3, cap, hq, hkv, D);
  float *gkc = up(std::vector<float>(kc.size())), *gvc = up(std::vector<float>(vc.size()));
  float* gyc = up(std::vector<float>(yc.size()));
  gpu_->kv_cache_write(gkc, gk, T, 0, cap, hkv, D);
  gpu_->kv_cache_write(gvc, gv, T, 0, cap, hkv, D);
  gpu_->attention_cached(gyc, nullptr, gq + (T - 3) * hq * D, gkc, gvc, 3, T - 3, cap, hq, hkv, D);
  EXPECT_LT(norm_relative(yc, down(gyc, yc.size())), kFp32Tol);
}

// The fused kernels (flash_attention.cuh) against the CPU fp32 reference:
// both head sizes, T not a multiple of the 64-row tiles, grouped-query heads,
// backward accumulating into gradients that are not zero, every element of
// every output written (outputs start as NaN).
TEST_F(CudaParity, FusedAttentionMatchesTheReference) {
  ASSERT_EQ(gpu_->matmul_precision(), MatmulPrecision::kBf16);
  for (int D : {64, 128}) {
    for (auto [B, T, hq, hkv] : {std::array<int, 4>{2, 200, 4, 2}, std::array<int, 4>{1, 64, 2, 2},
                                 std::array<int, 4>{1, 7, 2, 1}, std::array<int, 4>{1, 7, 8, 2},
                                 std::array<int, 4>{1, 70, 8, 1}, std::array<int, 4>{1, 7, 8, 1}}) {
      SCOPED_TRACE("D " + std::to_string(D) + " B " + std::to_string(B) + " T " + std::to_string(T) +
                   " heads " + std::to_string(hq) + "/" + std::to_string(hkv));
      ASSERT_TRUE(gpu_->attention_runs_fused(D));
      const size_t nq = size_t(B) * T * hq * D, nk = size_t(B) * T * hkv * D;
      auto q = testing::random_vector(nq, 11 + D), k = testing::random_vector(nk, 12 + D);
      auto v = testing::random_vector(nk, 13 + D), dy = testing::random_vector(nq, 14 + D);
      auto dq = testing::random_vector(nq, 15), dk = testing::random_vector(nk, 16), dv = testing::random_vector(nk, 17);
      std::vector<float> y(nq), lse(size_t(B) * hq * T), scratch(attention_scratch_floats(T, hq));
      const std::vector<float> dq0 = dq, dk0 = dk, dv0 = dv;
      cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), B, T, hq, hkv, D);
      cpu::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dy.data(), q.data(), k.data(),
                              v.data(), lse.data(), B, T, hq, hkv, D);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      float *gq = up(q), *gk = up(k), *gv = up(v), *gdy = up(dy);
      float *gy = up(std::vector<float>(nq, nan)), *gl = up(std::vector<float>(lse.size(), nan));
      float* gs = up(std::vector<float>(size_t(B) * T * hq, nan));
      float *gdq = up(dq0), *gdk = up(dk0), *gdv = up(dv0);
      gpu_->attention_forward(gy, gl, gs, gq, gk, gv, B, T, hq, hkv, D);
      gpu_->attention_backward(gdq, gdk, gdv, gs, gdy, gy, gq, gk, gv, gl, B, T, hq, hkv, D);
      auto subtract = [](std::vector<float> a, const std::vector<float>& b) {
        for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
        return a;
      };
      EXPECT_LT(norm_relative(y, down(gy, nq)), 1e-2);
      EXPECT_LT(norm_relative(lse, down(gl, lse.size())), 1e-2);
      // The gradients' own part, not the values they were accumulated onto.
      EXPECT_LT(norm_relative(subtract(dq, dq0), subtract(down(gdq, nq), dq0)), 1e-2);
      EXPECT_LT(norm_relative(subtract(dk, dk0), subtract(down(gdk, nk), dk0)), 1e-2);
      EXPECT_LT(norm_relative(subtract(dv, dv0), subtract(down(gdv, nk), dv0)), 1e-2);
    }
  }
  gpu_->set_attention_backend(AttentionBackend::kMath);
  EXPECT_FALSE(gpu_->attention_runs_fused(128));
  gpu_->set_attention_backend(AttentionBackend::kAuto);
}

TEST_F(CudaParity, ElementwiseOpsRopeAndCrossEntropy) {
  const int n = 50, heads = 4, D = 32, V = 1000;
  ModelConfig c;
  c.head_dim = D;
  c.max_seq = 64;
  const RopeTable table = make_rope_table(c);
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = (i * 7) % 64;
  auto x = testing::random_vector(n * heads * D, 1), rx = x;
  cpu::rope_forward(rx.data(), pos.data(), n, heads, D, table.cos.data(), table.sin.data());
  float *gx = up(x), *gcos = up(table.cos), *gsin = up(table.sin);
  int32_t* gpos = up(pos);
  gpu_->rope_forward(gx, gpos, n, heads, D, gcos, gsin);
  EXPECT_LT(norm_relative(rx, down(gx, x.size())), kFp32Tol);
  gpu_->rope_backward(gx, gpos, n, heads, D, gcos, gsin);
  EXPECT_LT(norm_relative(x, down(gx, x.size())), kFp32Tol);

  auto g = testing::random_vector(n * 64, 2), u = testing::random_vector(n * 64, 3);
  std::vector<float> h(g.size()), dg(g.size()), du(g.size());
  cpu::swiglu_forward(h.data(), g.data(), u.data(), g.size());
  cpu::swiglu_backward(dg.data(), du.data(), u.data(), g.data(), u.data(), g.size());
  float *gg = up(g), *gu = up(u), *gh = up(h), *gdg = up(std::vector<float>(g.size()));
  float* gdu = up(std::vector<float>(g.size()));
  gpu_->swiglu_forward(gh, gg, gu, g.size());
  gpu_->swiglu_backward(gdg, gdu, gu, gg, gu, g.size());
  EXPECT_LT(norm_relative(h, down(gh, h.size())), kFp32Tol);
  EXPECT_LT(norm_relative(dg, down(gdg, dg.size())), kFp32Tol);
  EXPECT_LT(norm_relative(du, down(gdu, du.size())), kFp32Tol);

  auto logits = testing::random_vector(n * V, 4, 3.0f);
  std::vector<int32_t> targets(n);
  for (int i = 0; i < n; ++i) targets[i] = i == 3 ? kIgnoreIndex : (i * 37) % V;
  std::vector<float> losses(n), scratch(3 * n), dl = logits;
  cpu::cross_entropy_forward_backward(losses.data(), dl.data(), scratch.data(), targets.data(), n,
                                      V, 0, 0.25f, nullptr);
  float *gl = up(logits), *gloss = up(losses), *gsc = up(scratch);
  int32_t* gt = up(targets);
  gpu_->cross_entropy_forward_backward(gloss, gl, gsc, gt, n, V, 0, 0.25f, nullptr);
  EXPECT_LT(norm_relative(losses, down(gloss, n)), kFp32Tol);
  EXPECT_LT(norm_relative(dl, down(gl, dl.size())), kFp32Tol);
  EXPECT_NEAR(gpu_->sum_of_squares(gl, dl.size()), cpu::sum_of_squares(dl.data(), dl.size()),
              1e-6 * cpu::sum_of_squares(dl.data(), dl.size()));
}

TEST_F(CudaParity, WholeTinyModelForwardBackwardAndDecode) {
  ModelConfig c = *preset_config("tiny");
  auto cpu_backend = make_cpu_backend();
  auto cpu_model = std::move(Model::create(c, {}, cpu_backend.get()).value());
  auto gpu_model = std::move(Model::create(c, {}, gpu_.get()).value());
  cpu_model->init_weights(9);
  gpu_model->init_weights(9);
  const int B = 4, T = 64;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 31 + 7) % 256, targets[i] = (i * 17 + 1) % 256;
  const LossSum lc = cpu_model->forward(tokens.data(), targets.data(), B, T);
  cpu_model->backward(1.0f / lc.count);
  const LossSum lg = gpu_model->forward(tokens.data(), targets.data(), B, T);
  gpu_model->backward(1.0f / lg.count);
  EXPECT_NEAR(lg.mean(), lc.mean(), 1e-2 * lc.mean());
  for (int g = 0; g < cpu_model->num_groups(); ++g) {
    const size_t n = cpu_model->layout().groups[g].numel;
    std::vector<float> want(cpu_model->grads(g), cpu_model->grads(g) + n);
    EXPECT_LT(norm_relative(want, down(gpu_model->grads(g), n)), 5e-2)
        << cpu_model->layout().groups[g].name;
  }
  // A second step after warm-up allocates nothing on the device.
  const int64_t allocations = gpu_->stats().device_allocations;
  gpu_model->zero_grads();
  gpu_model->forward(tokens.data(), targets.data(), B, T);
  gpu_model->backward(1.0f / lg.count);
  EXPECT_EQ(gpu_->stats().device_allocations, allocations);
  // KV-cache decoding.
  auto cc = std::move(KvCache::create(*cpu_model, 1, 32).value());
  auto gc = std::move(KvCache::create(*gpu_model, 1, 32).value());
  std::vector<float> want(256), got(256);
  cpu_model->prefill(cc, 0, tokens.data(), 20, want.data());
  gpu_model->prefill(gc, 0, tokens.data(), 20, got.data());
  EXPECT_LT(norm_relative(want, got), kGemmTol);
  const int slot = 0;
  cpu_model->decode(cc, &slot, &tokens[20], 1, want.data());
  gpu_model->decode(gc, &slot, &tokens[20], 1, got.data());
  EXPECT_LT(norm_relative(want, got), kGemmTol);
}

}  // namespace
}  // namespace cohort::models
