// Tensor parallelism inside the model: tp = 2 and 4 shards, run as threads
// over an in-process TP group, reproduce the unsharded loss, gradients and
// generation exactly up to fp32 reassociation, dense and mixture-of-experts
// (each expert split like the dense MLP, the router replicated).
#include <gtest/gtest.h>

#include "models/kv_cache.h"
#include "models/model.h"
#include "tests/models/grad_check.h"
#include "tests/models/tp_group.h"

namespace cohort::models {
namespace {

// Copies the slice of a full-model tensor that `local` describes.
std::vector<float> slice_of(const ParamSpec& full, const float* data, const ParamSpec& local) {
  std::vector<float> out(local.numel);
  if (local.shape.size() == 1) {
    const int64_t b = local.shard_dim == ShardDim::kRows ? local.shard_begin : 0;
    std::copy(data + full.offset + b, data + full.offset + b + local.numel, out.begin());
    return out;
  }
  const int64_t rows = local.shape[0], cols = local.shape[1], gcols = full.shape[1];
  const int64_t r0 = local.shard_dim == ShardDim::kRows ? local.shard_begin : 0;
  const int64_t c0 = local.shard_dim == ShardDim::kCols ? local.shard_begin : 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = data[full.offset + (r0 + r) * gcols + c0 + c];
    }
  }
  return out;
}

struct TpCase {
  int tp;
  int kv_heads;
  bool tied;
  bool moe = false;  // the tiny-moe preset, with its load-balancing loss
};

class TensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallel, ShardsReproduceTheFullModel) {
  const TpCase tc = GetParam();
  ModelConfig c = *preset_config(tc.moe ? "tiny-moe" : "tiny");
  c.kv_heads = tc.kv_heads;
  c.tie_embeddings = tc.tied;
  const int B = 2, T = 8;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37) % 256, targets[i] = (i * 91 + 5) % 256;
  targets[4] = kIgnoreIndex;
  auto cpu = make_cpu_backend();
  auto full = std::move(Model::create(c, {}, cpu.get()).value());
  full->init_weights(5, 0.1f);
  const LossSum lf = full->forward(tokens.data(), targets.data(), B, T);
  full->backward(1.0f / lf.count);
  std::vector<float> full_logits(c.vocab_size);
  auto full_cache = std::move(KvCache::create(*full, 1, 16).value());
  full->prefill(full_cache, 0, tokens.data(), T, full_logits.data());

  testing::ThreadTpGroup group(tc.tp);
  std::vector<std::unique_ptr<Backend>> backends(tc.tp);  // outlive the shards
  std::vector<std::unique_ptr<Model>> shards(tc.tp);
  std::vector<LossSum> losses(tc.tp);
  std::vector<std::vector<float>> logits(tc.tp, std::vector<float>(c.vocab_size));
  group.run([&](int rank) {
    backends[rank] = make_cpu_backend();
    shards[rank] = std::move(
        Model::create(c, ShardSpec{rank, tc.tp}, backends[rank].get(), group.comm(rank)).value());
    Model& m = *shards[rank];
    m.init_weights(5, 0.1f);
    losses[rank] = m.forward(tokens.data(), targets.data(), B, T);
    m.backward(1.0f / losses[rank].count);
    auto cache = std::move(KvCache::create(m, 1, 16).value());
    m.prefill(cache, 0, tokens.data(), T, logits[rank].data());
  });
  for (int r = 0; r < tc.tp; ++r) {
    EXPECT_NEAR(losses[r].mean(), lf.mean(), 1e-5 * lf.mean());
    for (int i = 0; i < c.vocab_size; ++i) ASSERT_NEAR(logits[r][i], full_logits[i], 1e-4);
  }
  // Gradients: each shard's slice equals the full gradient's slice, after
  // summing partial gradients over the ranks holding the same slice (all
  // ranks for q_norm/k_norm; the ranks sharing a replicated KV head).
  for (int g = 0; g < full->num_groups(); ++g) {
    for (const ParamSpec& fp : full->layout().groups[g].params) {
      for (int r = 0; r < tc.tp; ++r) {
        const ParamSpec* lp = shards[r]->layout().groups[g].find(fp.name);
        ASSERT_NE(lp, nullptr) << fp.name;
        std::vector<float> got(shards[r]->grads(g) + lp->offset,
                               shards[r]->grads(g) + lp->offset + lp->numel);
        if (lp->tp_partial_grad) {
          got.assign(lp->numel, 0.0f);
          for (int o = 0; o < tc.tp; ++o) {
            const ParamSpec* op = shards[o]->layout().groups[g].find(fp.name);
            if (op->shard_begin != lp->shard_begin) continue;
            for (size_t i = 0; i < lp->numel; ++i) got[i] += shards[o]->grads(g)[op->offset + i];
          }
        }
        const std::vector<float> want = slice_of(fp, full->grads(g), *lp);
        for (size_t i = 0; i < lp->numel; ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-5 + 1e-3 * std::abs(want[i])) << fp.name << " " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, TensorParallel,
                         ::testing::Values(TpCase{2, 4, false}, TpCase{4, 4, true},
                                           TpCase{4, 2, false}, TpCase{2, 4, false, true},
                                           TpCase{4, 2, true, true}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_kv" +
                                  std::to_string(info.param.kv_heads) +
                                  (info.param.tied ? "_tied" : "") + (info.param.moe ? "_moe" : "");
                         });

}  // namespace
}  // namespace cohort::models
