// LoRA adapters on the CUDA backend against the fp32 CPU reference: loss and
// adapter gradients with bf16 GEMMs, dropout drawing the CPU's masks, a
// frozen base that stays bit for bit; without dropout the adapters run
// inside the fused training blocks (block_engine.h) in every checkpointing
// mode, with dropout op by op; a base held block by block in bf16 (the
// GEMMs reading its image) trains as the resident bf16-rounded base. Skips
// with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "models/cuda_backend.h"
#include "models/lora.h"
#include "models/quantized_base.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using testing::norm_relative;

// A shape the fused blocks take (head_dim 128, bf16 GEMMs).
ModelConfig qwen3_like() {
  ModelConfig c;
  c.vocab_size = 512, c.hidden = 256, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 128;
  c.intermediate = 512, c.qk_norm = true, c.max_seq = 256;
  return c;
}

struct AdaptedStep {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> base;  // the base after the step
  bool fused = true;
};

// The frozen base: resident as initialised, resident rounded to bf16, or
// held block by block in bf16 (models/quantized_base.h).
enum class Base { kResident, kResidentRounded, kHeldBf16 };

AdaptedStep step(const ModelConfig& c, Backend* backend, double dropout, ActivationCheckpointing mode,
                 Base base_form = Base::kResident) {
  auto model = std::move(Model::create(c, {}, backend, {}, Model::Buffers::kParamsOnly).value());
  model->init_weights(21, 0.05f);
  std::unique_ptr<QuantizedBase> held;
  if (base_form == Base::kHeldBf16) held = std::move(QuantizedBase::create(*model, HeldFormat::kBf16).value());
  if (base_form != Base::kResident) round_frozen_base(*model, DType::kBF16);
  model->set_activation_checkpointing(mode);
  LoraConfig l;
  l.rank = 8, l.alpha = 16, l.dropout = dropout;
  l.targets.assign(std::begin(kAllLoraTargets), std::end(kAllLoraTargets));
  auto lora = std::move(LoraAdapters::create(*model, l).value());
  lora->init(3);
  // B away from zero, the same values on both backends.
  for (int g = 0; g < lora->num_groups(); ++g) {
    const ParamGroup& group = lora->layout().groups[g];
    if (!group.numel) continue;
    std::vector<float> host(group.numel);
    backend->copy_to_host(host.data(), lora->params(g), host.size() * sizeof(float));
    for (const ParamSpec& p : group.params)
      if (p.name.find("lora_B") != std::string::npos)
        for (size_t i = 0; i < p.numel; ++i)
          host[p.offset + i] = 0.02f * float(int((i * 37 + g) % 11) - 5);
    backend->copy_from_host(lora->params(g), host.data(), host.size() * sizeof(float));
  }
  model->set_lora(lora.get());
  if (held) model->set_hooks(held->wrap(model->hooks()));
  const int B = 2, T = 64;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i)
    tokens[i] = (i * 131 + 7) % c.vocab_size, targets[i] = (i * 71 + 3) % c.vocab_size;
  lora->zero_grads();
  lora->begin_training_pass(5, 1);
  AdaptedStep run;
  const LossSum loss = model->forward(tokens.data(), targets.data(), B, T);
  model->backward(1.0f / loss.count);
  run.loss = loss.mean();
  run.fused = model->runs_fused_blocks();
  for (int g = 0; g < lora->num_groups(); ++g) {
    std::vector<float> v(lora->layout().groups[g].numel);
    if (!v.empty()) backend->copy_to_host(v.data(), lora->grads(g), v.size() * sizeof(float));
    run.grads.push_back(std::move(v));
  }
  for (int g = 0; g < model->num_groups(); ++g) {
    std::vector<float> v(model->params(g) ? model->layout().groups[g].numel : 0);  // a held block: none
    if (!v.empty()) backend->copy_to_host(v.data(), model->params(g), v.size() * sizeof(float));
    run.base.push_back(std::move(v));
  }
  return run;
}

TEST(LoraGpu, MatchesTheCpuReferenceFusedWithoutDropoutAndOpByOpWith) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: the LoRA GPU tests run on the GPU machine";
  auto gpu = std::move(make_cuda_backend(0).value());
  auto cpu = make_cpu_backend();
  const ModelConfig c = qwen3_like();
  for (double dropout : {0.0, 0.1}) {
    for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                      ActivationCheckpointing::kFull}) {
      SCOPED_TRACE(std::string(to_string(mode)) + ", dropout " + std::to_string(dropout));
      const AdaptedStep want = step(c, cpu.get(), dropout, mode);
      const AdaptedStep got = step(c, gpu.get(), dropout, mode);
      EXPECT_EQ(got.fused, dropout == 0.0) << "the fused blocks take adapters without dropout only";
      EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss);
      double worst = 0;
      for (size_t g = 0; g < want.grads.size(); ++g) {
        if (want.grads[g].empty()) continue;
        const double e = norm_relative(want.grads[g], got.grads[g]);
        EXPECT_LT(e, 5e-2) << "adapter group " << g;  // bf16 GEMM operands
        worst = std::max(worst, e);
      }
      for (size_t g = 0; g < want.base.size(); ++g)
        EXPECT_EQ(got.base[g], want.base[g]) << "base group " << g;
      std::printf(
          "LoRA on CUDA (%s), %s, dropout %.1f: loss %.5f (CPU %.5f), worst adapter gradient error "
          "%.4f\n",
          got.fused ? "fused blocks" : "op by op", to_string(mode), dropout, got.loss, want.loss, worst);
    }
  }
}

TEST(LoraGpu, ABaseHeldInBf16TrainsAsTheResidentRoundedBase) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: the LoRA GPU tests run on the GPU machine";
  auto gpu = std::move(make_cuda_backend(0).value());
  const ModelConfig c = qwen3_like();
  for (double dropout : {0.0, 0.1}) {
    for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kFull}) {
      SCOPED_TRACE(std::string(to_string(mode)) + ", dropout " + std::to_string(dropout));
      const AdaptedStep want = step(c, gpu.get(), dropout, mode, Base::kResidentRounded);
      const AdaptedStep got = step(c, gpu.get(), dropout, mode, Base::kHeldBf16);
      EXPECT_EQ(got.fused, want.fused);
      // The same bf16 operands either way: what differs is only where they
      // are read from.
      EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
      double worst = 0;
      for (size_t g = 0; g < want.grads.size(); ++g) {
        if (want.grads[g].empty()) continue;
        const double e = norm_relative(want.grads[g], got.grads[g]);
        EXPECT_LT(e, 1e-5) << "adapter group " << g;
        worst = std::max(worst, e);
      }
      std::printf("held bf16 base (%s), %s, dropout %.1f: loss %.6f (resident %.6f), worst adapter gradient "
                  "difference %.2e\n",
                  got.fused ? "fused blocks" : "op by op", to_string(mode), dropout, got.loss, want.loss, worst);
    }
  }
}

TEST(LoraGpu, DropoutDrawsTheCpuMask) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: the LoRA GPU tests run on the GPU machine";
  auto gpu = std::move(make_cuda_backend(0).value());
  auto cpu = make_cpu_backend();
  const int rows = 37, cols = 300;
  const DropoutMask mask{77, 0.3f, 100, 1000};
  std::vector<float> x = testing::random_vector(size_t(rows) * cols, 1), want(x.size()),
                     got(x.size());
  cpu->dropout_forward(want.data(), x.data(), rows, cols, mask);
  float* dx = gpu->alloc_floats(x.size());
  float* dout = gpu->alloc_floats(x.size());
  gpu->copy_from_host(dx, x.data(), x.size() * sizeof(float));
  gpu->dropout_forward(dout, dx, rows, cols, mask);
  gpu->copy_to_host(got.data(), dout, got.size() * sizeof(float));
  EXPECT_EQ(got, want);
  gpu->free(dx);
  gpu->free(dout);
}

}  // namespace
}  // namespace cohort::models
