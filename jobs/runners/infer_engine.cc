// ModelEngine: generation over models::Model and its KV cache.
#include "jobs/runners/infer_engine.h"

#include <algorithm>

namespace cohort::runners {
namespace {

// Lowest index wins ties, as torch.argmax and TokenSampler's greedy path do.
int32_t argmax(const float* logits, int vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

}  // namespace

void InferenceEngine::prefill_many(const int* slots,
                                   const std::vector<const std::vector<int32_t>*>& prompts,
                                   float* logits, int32_t* greedy) {
  const size_t V = static_cast<size_t>(vocab_size());
  for (size_t j = 0; j < prompts.size(); ++j) {
    prefill(slots[j], prompts[j]->data(), static_cast<int>(prompts[j]->size()),
            logits ? logits + j * V : nullptr, greedy + j);
  }
}

Result<std::unique_ptr<ModelEngine>> ModelEngine::create(std::unique_ptr<models::Backend> backend,
                                                         std::unique_ptr<models::Model> model,
                                                         int slots, int capacity) {
  COHORT_ASSIGN_OR_RETURN(models::KvCache cache, models::KvCache::create(*model, slots, capacity));
  std::unique_ptr<ModelEngine> engine(new ModelEngine());
  engine->backend_ = std::move(backend);
  engine->model_ = std::move(model);
  engine->cache_ = std::make_unique<models::KvCache>(std::move(cache));
  return engine;
}

ModelEngine::~ModelEngine() {
  cache_.reset();
  model_.reset();
}

std::string ModelEngine::describe() const {
  return backend_ && backend_->device() == models::Device::kCpu ? "cpu fp32" : "cuda fp32";
}

void ModelEngine::prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) {
  const int V = vocab_size();
  float* out = logits;
  if (!out) {
    scratch_.resize(V);
    out = scratch_.data();
  }
  cache_->reset(slot);
  model_->prefill(*cache_, slot, tokens, n, out);
  if (!logits) *greedy = argmax(out, V);
}

void ModelEngine::decode(const int* slots, const int32_t* tokens, int B, float* logits,
                         int32_t* greedy) {
  const int V = vocab_size();
  float* out = logits;
  if (!out) {
    scratch_.resize(static_cast<size_t>(B) * V);
    out = scratch_.data();
  }
  model_->decode(*cache_, slots, tokens, B, out);
  if (!logits) {
    for (int b = 0; b < B; ++b) greedy[b] = argmax(out + static_cast<size_t>(b) * V, V);
  }
}

}  // namespace cohort::runners
