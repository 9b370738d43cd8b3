// The CUDA backend's fused training blocks (models/block_engine.h,
// models/cuda/train_blocks.cu) against the fp32 CPU reference model and the
// GPU's own op-by-op path: loss and every parameter gradient, on random
// weights and tokens, for Qwen3-like (per-head norms, head_dim 128) and
// Llama-like (head_dim 64, groups of 4) shapes, sequences that are not a
// multiple of the attention tiles, each checkpointing mode, with and without
// bf16 working weights; mixtures of experts' sparse layers with their GEMMs
// per expert and grouped. Skips with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/cuda_backend.h"
#include "models/model.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using testing::norm_relative;

ModelConfig qwen3_like() {
  ModelConfig c;
  c.vocab_size = 512, c.hidden = 256, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 128;
  c.intermediate = 512, c.qk_norm = true, c.max_seq = 256;
  return c;
}

ModelConfig llama_like() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 384, c.hidden = 256, c.layers = 2, c.heads = 8, c.kv_heads = 2, c.head_dim = 64;
  c.intermediate = 384, c.qk_norm = false, c.max_seq = 256;
  return c;
}

// Qwen3-MoE-like: a dense first layer, then sparse layers of 8 experts of
// 128, top 2, renormalised, with the load-balancing loss.
ModelConfig qwen3_moe_like() {
  ModelConfig c = qwen3_like();
  c.model_type = "qwen3_moe", c.layers = 3;
  c.moe = MoeConfig{8, 2, 128, true, 1, {0}, true, 0.01f};
  return c;
}

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

class TrainBlocks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device visible: the fused-block tests run on the GPU machine";
    }
    gpu_ = std::move(make_cuda_backend(0).value());
  }

  // One forward and backward of a model on `backend`; fused says which
  // block path the GPU takes.
  StepResult step(const ModelConfig& c, Backend* backend, bool fused, ActivationCheckpointing mode,
           bool working, int B, int T, bool expect_fused, int head_chunk = 0) {
    auto model = std::move(Model::create(c, {}, backend).value());
    model->init_weights(21, 0.05f);
    model->set_fused_blocks(fused);
    model->set_fused_moe_blocks(fused_moe_);
    model->set_activation_checkpointing(mode);
    model->set_lm_head_chunk_tokens(head_chunk);
    std::vector<void*> copies;
    if (working) {
      for (int g = 0; g < model->num_groups(); ++g) {
        const size_t n = model->layout().groups[g].numel;
        copies.push_back(backend->alloc(n * 2));
        backend->set_working_weights(model->params(g), copies.back(), n, DType::kBF16);
      }
    }
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; ++i) {
      tokens[i] = (i * 131 + 7) % c.vocab_size;
      targets[i] = (i * 71 + 3) % c.vocab_size;
    }
    StepResult run;
    // Two steps: the second on the warm model must allocate nothing and
    // give the same gradients as the first (nothing stale in the arenas).
    for (int pass = 0; pass < 2; ++pass) {
      model->zero_grads();
      const int64_t allocations = cuda_ ? cuda_->stats().device_allocations : 0;
      const LossSum loss = model->forward(tokens.data(), targets.data(), B, T);
      model->backward(1.0f / loss.count);
      if (pass == 1 && cuda_) {
        EXPECT_EQ(cuda_->stats().device_allocations, allocations);
      }
      run.loss = loss.mean();
      run.grads.clear();
      for (int g = 0; g < model->num_groups(); ++g) {
        std::vector<float> v(model->layout().groups[g].numel);
        backend->copy_to_host(v.data(), model->grads(g), v.size() * sizeof(float));
        run.grads.push_back(std::move(v));
      }
    }
    EXPECT_EQ(model->runs_fused_blocks(), expect_fused);
    for (int g = 0; g < model->num_groups(); ++g) backend->clear_working_weights(model->params(g));
    for (void* p : copies) backend->free(p);
    return run;
  }

  void compare(const ModelConfig& c, ActivationCheckpointing mode, bool working, int B, int T,
               int head_chunk = 0) {
    SCOPED_TRACE(std::string(to_string(mode)) + (working ? ", working weights" : "") +
                 ", T " + std::to_string(T) + ", head_dim " + std::to_string(c.head_dim) +
                 ", head chunk " + std::to_string(head_chunk));
    auto cpu = make_cpu_backend();
    cuda_ = nullptr;
    const StepResult want = step(c, cpu.get(), true, mode, false, B, T, false);
    cuda_ = gpu_.get();
    const StepResult ops = step(c, gpu_.get(), false, mode, working, B, T, false, head_chunk);
    EXPECT_NEAR(ops.loss, want.loss, 1e-2 * want.loss);
    // The fused blocks with each attention they can run.
    for (AttentionBackend attention : fused_attentions()) {
      SCOPED_TRACE(attention == AttentionBackend::kCudnn ? "cuDNN attention" : "flash attention");
      gpu_->set_attention_backend(attention);
      const StepResult fused = step(c, gpu_.get(), true, mode, working, B, T, true, head_chunk);
      EXPECT_NEAR(fused.loss, want.loss, 1e-2 * want.loss);
      double worst_fused = 0, worst_ops = 0;
      for (size_t g = 0; g < want.grads.size(); ++g) {
        const double e_fused = norm_relative(want.grads[g], fused.grads[g]);
        const double e_ops = norm_relative(want.grads[g], ops.grads[g]);
        // bf16 activations add their rounding to the GEMM operands' own.
        EXPECT_LT(e_fused, 5e-2) << "group " << g << " (op-by-op GPU: " << e_ops << ")";
        EXPECT_LT(e_ops, 5e-2) << "group " << g;
        worst_fused = std::max(worst_fused, e_fused), worst_ops = std::max(worst_ops, e_ops);
      }
      std::printf("%s, T %d, head_dim %d, %s attention: loss %.5f (CPU %.5f), worst gradient error fused "
                  "%.4f, op by op %.4f\n",
                  to_string(mode), T, c.head_dim, attention == AttentionBackend::kCudnn ? "cuDNN" : "flash",
                  fused.loss, want.loss, worst_fused, worst_ops);
    }
    gpu_->set_attention_backend(AttentionBackend::kAuto);
  }

  // The flash kernels, and cuDNN's attention where the library loads.
  std::vector<AttentionBackend> fused_attentions() const {
    const Status cudnn = gpu_->attention_available(AttentionBackend::kCudnn);
    if (cudnn.is_ok()) return {AttentionBackend::kFlash, AttentionBackend::kCudnn};
    std::printf("cuDNN attention not compared: %s\n", cudnn.message().c_str());
    return {AttentionBackend::kFlash};
  }

  std::unique_ptr<CudaBackend> gpu_;
  CudaBackend* cuda_ = nullptr;
  bool fused_moe_ = false;  // sparse layers in the fused blocks (set_fused_moe_blocks)
};

TEST_F(TrainBlocks, Qwen3ShapeMatchesTheReferenceInEveryCheckpointingMode) {
  for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                    ActivationCheckpointing::kFull}) {
    compare(qwen3_like(), mode, false, 2, 100);
  }
}

TEST_F(TrainBlocks, LlamaShapeWithWorkingWeights) {
  compare(llama_like(), ActivationCheckpointing::kNone, true, 3, 77);
  compare(llama_like(), ActivationCheckpointing::kSelective, true, 1, 200, 64);
}

// After training steps on the fused head, a forward without targets still
// gives every row's fp32 logits.
TEST_F(TrainBlocks, LogitsWithoutTargetsAfterTraining) {
  const ModelConfig c = qwen3_like();
  auto cpu = make_cpu_backend();
  auto want = std::move(Model::create(c, {}, cpu.get()).value());
  auto got = std::move(Model::create(c, {}, gpu_.get()).value());
  want->init_weights(5, 0.05f);
  got->init_weights(5, 0.05f);
  const int B = 1, T = 90;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + 1) % c.vocab_size, targets[i] = i % c.vocab_size;
  got->forward(tokens.data(), targets.data(), B, T);
  EXPECT_TRUE(got->runs_fused_blocks());
  got->backward(1.0f);
  want->forward(tokens.data(), nullptr, B, T);
  got->forward(tokens.data(), nullptr, B, T);
  const size_t n = size_t(B) * T * c.vocab_size;
  std::vector<float> w(want->logits(), want->logits() + n), g(n);
  gpu_->copy_to_host(g.data(), got->logits(), n * sizeof(float));
  EXPECT_LT(norm_relative(w, g), 2e-2);
}

TEST_F(TrainBlocks, Qwen3ShapeWithWorkingWeightsAndTileMultiples) {
  compare(qwen3_like(), ActivationCheckpointing::kNone, true, 2, 128);
}

// A mixture of experts' sparse layers inside the fused blocks: router,
// experts and the load-balancing loss against the reference, every mode.
TEST_F(TrainBlocks, SparseLayersMatchTheReferenceInEveryCheckpointingMode) {
  fused_moe_ = true;
  for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                    ActivationCheckpointing::kFull}) {
    compare(qwen3_moe_like(), mode, false, 2, 100);
  }
  compare(qwen3_moe_like(), ActivationCheckpointing::kNone, true, 1, 128);
}

// The same with each expert's GEMMs a cuBLAS call of their own
// (COHORT_MOE_GEMMS=loop, read as the blocks are made); the test above
// takes the default, one grouped call for each kind.
TEST_F(TrainBlocks, SparseLayersWithOneGemmAnExpertMatchTheReference) {
  struct LoopGemms {
    LoopGemms() { ::setenv("COHORT_MOE_GEMMS", "loop", 1); }
    ~LoopGemms() { ::unsetenv("COHORT_MOE_GEMMS"); }
  } loop;
  fused_moe_ = true;
  compare(qwen3_moe_like(), ActivationCheckpointing::kNone, false, 2, 100);
  compare(qwen3_moe_like(), ActivationCheckpointing::kSelective, true, 1, 128);
}

// What the fused blocks cannot take falls back to the op-by-op path.
TEST_F(TrainBlocks, UnsupportedShapesRunOpByOp) {
  ModelConfig c = qwen3_like();
  c.attention_bias = true, c.model_type = "qwen2", c.qk_norm = false;
  cuda_ = gpu_.get();
  step(c, gpu_.get(), true, ActivationCheckpointing::kNone, false, 1, 64, false);
  ModelConfig d = qwen3_like();
  d.head_dim = 32;
  step(d, gpu_.get(), true, ActivationCheckpointing::kNone, false, 1, 64, false);
  // A mixture of experts unless its sparse layers are asked for.
  step(qwen3_moe_like(), gpu_.get(), true, ActivationCheckpointing::kNone, false, 1, 64, false);
  gpu_->set_matmul_precision(MatmulPrecision::kFp16);
  step(qwen3_like(), gpu_.get(), true, ActivationCheckpointing::kNone, false, 1, 64, false);
  gpu_->set_matmul_precision(MatmulPrecision::kBf16);
}

}  // namespace
}  // namespace cohort::models
