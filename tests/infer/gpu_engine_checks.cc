#include "tests/infer/gpu_engine_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "hf/weights.h"
#include "infer/scheduler.h"
#include "models/backend.h"
#include "models/cuda_backend.h"
#include "models/model.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {

std::string graph_engine_missing() {
#ifndef COHORT_HAVE_CUDA
  return "built without CUDA: no bf16 graph engine";
#else
  if (models::cuda_device_count() < 1) return "needs a GPU, found none (run on the GPU machine: ctest -L gpu)";
  return "";
#endif
}

int parted_at_near_ties(const TokenRuns& want_runs, const TokenRuns& got_runs,
                        const std::map<int64_t, std::vector<std::vector<float>>>& logits, size_t length,
                        float tie, float relative_tie) {
  int parted = 0;
  for (const auto& [id, want] : want_runs) {
    const std::vector<int32_t>& got = got_runs.at(id);
    EXPECT_EQ(want.size(), length) << id;
    EXPECT_EQ(got.size(), length) << id;
    size_t k = 0;
    while (k < want.size() && k < got.size() && want[k] == got[k]) ++k;
    if (k == want.size() || k == got.size()) continue;
    ++parted;
    const std::vector<float>& row = logits.at(id).at(k);
    float largest = 0.0f;
    for (float x : row) largest = std::max(largest, std::fabs(x));
    const float gap = row[want[k]] - row[got[k]];
    if (relative_tie > 0.0f) std::printf("  request %lld step %zu: gap %.3f, largest |logit| %.2f\n", (long long)id, k, gap, largest);
    EXPECT_LE(gap, std::max(tie, relative_tie * largest))
        << "request " << id << " step " << k << ": " << want[k] << " vs " << got[k] << " is not a near tie"
        << " (largest |logit| " << largest << ")";
  }
  return parted;
}

std::string gpu_model_dir(int head_dim) {
  models::ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 1024, c.hidden = 256, c.layers = 3, c.heads = 8, c.kv_heads = 4;
  c.head_dim = head_dim, c.intermediate = 512, c.max_seq = 256;
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(c, {0, 1}, backend.get());
  EXPECT_TRUE(model.is_ok());
  (*model)->init_weights(21, 0.2f);
  const auto dir = scratch_dir("gpu_hf_" + std::to_string(head_dim));
  EXPECT_TRUE(hf::save_model_folder(**model, dir.string()).is_ok());
  return dir.string();
}

Result<std::unique_ptr<models::decode::InferenceEngine>> graph_engine_over(
    const std::string& dir, const models::ModelConfig& config, const models::decode::CudaEngineOptions& options) {
  return models::decode::make_cuda_graph_engine(config, options, nullptr,
                                                [dir](models::Model& m) { return hf::load_weights(m, dir); });
}

TokenRuns five_greedy_requests(models::decode::InferenceEngine& engine,
                               std::map<int64_t, std::vector<std::vector<float>>>* logits,
                               const std::vector<int>& adapters) {
  infer::SchedulerOptions o;
  o.return_logits = logits != nullptr;
  if (logits) {
    o.on_logits = [logits](int64_t id, const float* row, int vocab) { (*logits)[id].emplace_back(row, row + vocab); };
  }
  infer::Scheduler s(engine, o);
  for (int id = 0; id < 5; ++id) {
    infer::SequenceRequest r;
    r.id = id;
    for (int t = 0; t < 3 + 11 * id; ++t) r.prompt.push_back((29 * id + 7 * t) % 1024);
    r.max_new_tokens = 12;
    if (!adapters.empty()) r.adapter = adapters[static_cast<size_t>(id) % adapters.size()];
    EXPECT_TRUE(s.add(std::move(r)).is_ok());
  }
  TokenRuns tokens;
  drain_tokens(s, tokens);
  return tokens;
}

void drain_tokens(infer::Scheduler& s, TokenRuns& into) {
  for (int guard = 0; !s.idle() && guard < 10000; ++guard) {
    for (const infer::TokenEvent& e : s.step()) {
      if (e.token >= 0) into[e.id].push_back(e.token);
    }
  }
  EXPECT_TRUE(s.idle());
}

}  // namespace cohort::testing
