// ModelEngine: generation over models::Model and its KV cache.
#include "models/decode/engine.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace cohort::models::decode {
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

void InferenceEngine::step(const int* decode_slots, const int32_t* decode_tokens, int d,
                           const std::vector<Chunk>& chunks, float* logits, int32_t* greedy) {
  const size_t V = static_cast<size_t>(vocab_size());
  for (size_t j = 0; j < chunks.size(); ++j) {
    const Chunk& c = chunks[j];
    const size_t row = static_cast<size_t>(d) + j;
    float* out = logits ? logits + row * V : nullptr;
    if (c.fresh) {
      prefill(c.slot, c.tokens, c.n, out, greedy + row);
    } else {
      extend(c.slot, c.tokens, c.n, out, greedy + row);
    }
  }
  if (d > 0) decode(decode_slots, decode_tokens, d, logits, greedy);
}

bool InferenceEngine::launch(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
                             const std::vector<Chunk>& chunks) {
  COHORT_CHECK_MSG(launched_.size() < 2, "{}: a third launched step before the first is collected", describe());
  std::vector<int32_t> tokens(decode_tokens, decode_tokens + d);
  for (int b = 0; b < d; ++b) {
    if (token_from == nullptr || token_from[b] < 0) continue;
    COHORT_CHECK_MSG(!launched_.empty() && static_cast<size_t>(token_from[b]) < launched_.back().size(),
                     "{}: decode row {} takes output {} of a step not in flight", describe(), b, token_from[b]);
    tokens[b] = launched_.back()[static_cast<size_t>(token_from[b])];
  }
  std::vector<int32_t> out(static_cast<size_t>(d) + chunks.size());
  step(decode_slots, tokens.data(), d, chunks, nullptr, out.data());
  launched_.push_back(std::move(out));
  return true;
}

void InferenceEngine::collect(int32_t* greedy) {
  COHORT_CHECK_MSG(!launched_.empty(), "{}: collect() with no step launched", describe());
  std::copy(launched_.front().begin(), launched_.front().end(), greedy);
  launched_.pop_front();
}

void InferenceEngine::extend(int, const int32_t*, int, float*, int32_t*) {
  COHORT_CHECK_MSG(false, "{} cannot extend a prefill (can_extend() is false)", describe());
}

Result<std::unique_ptr<ModelEngine>> ModelEngine::create(std::unique_ptr<models::Backend> backend,
                                                         std::unique_ptr<models::Model> model,
                                                         int slots, int capacity) {
  COHORT_ASSIGN_OR_RETURN(auto engine, borrow(*model, slots, capacity));
  engine->owned_backend_ = std::move(backend);
  engine->owned_model_ = std::move(model);
  return engine;
}

Result<std::unique_ptr<ModelEngine>> ModelEngine::borrow(models::Model& model, int slots, int capacity) {
  COHORT_ASSIGN_OR_RETURN(models::KvCache cache, models::KvCache::create(model, slots, capacity));
  std::unique_ptr<ModelEngine> engine(new ModelEngine());
  engine->model_ = &model;
  engine->cache_ = std::make_unique<models::KvCache>(std::move(cache));
  return engine;
}

ModelEngine::~ModelEngine() {
  cache_.reset();
  owned_model_.reset();
}

std::string ModelEngine::describe() const {
  return model_->backend().device() == models::Device::kCpu ? "cpu fp32" : "cuda fp32";
}

void ModelEngine::prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) {
  const int V = vocab_size();
  float* out = logits;
  if (!out) {
    scratch_.resize(V);
    out = scratch_.data();
  }
  cache_->reset(slot);
  route_adapters(&slot, 1, n);
  model_->prefill(*cache_, slot, tokens, n, out);
  if (!logits) *greedy = argmax(out, V);
}

int ModelEngine::add_adapter(std::unique_ptr<models::LoraAdapters> adapters) {
  adapters_.push_back(std::move(adapters));
  slot_adapter_.resize(static_cast<size_t>(slots()), -1);
  return static_cast<int>(adapters_.size()) - 1;
}

void ModelEngine::remove_adapter(int index) {
  COHORT_CHECK(index >= 0 && index < adapters());
  adapters_[static_cast<size_t>(index)].reset();
  // Slots that last ran it start their next sequence without it.
  for (int& a : slot_adapter_) {
    if (a == index) a = -1;
  }
}

void ModelEngine::set_adapter(int slot, int index) {
  COHORT_CHECK(slot >= 0 && slot < slots() && index >= -1 && index < adapters());
  slot_adapter_.resize(static_cast<size_t>(slots()), -1);
  slot_adapter_[static_cast<size_t>(slot)] = index;
}

void ModelEngine::route_adapters(const int* slots, int count, int rows_each) {
  if (adapters_.empty()) return;
  std::vector<models::Model::LoraRows> runs;
  for (int i = 0; i < count; ++i) {
    const int index = slot_adapter_[static_cast<size_t>(slots[i])];
    models::LoraAdapters* adapters = index >= 0 ? adapters_[static_cast<size_t>(index)].get() : nullptr;
    if (!runs.empty() && runs.back().adapters == adapters) {
      runs.back().count += rows_each;
    } else {
      runs.push_back({adapters, i * rows_each, rows_each});
    }
  }
  model_->set_lora_rows(std::move(runs));
}

void ModelEngine::extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) {
  const int V = vocab_size();
  float* out = logits;
  if (!out) {
    scratch_.resize(V);
    out = scratch_.data();
  }
  route_adapters(&slot, 1, n);
  model_->prefill(*cache_, slot, tokens, n, out);  // appends after the slot's positions
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
  route_adapters(slots, B, 1);
  model_->decode(*cache_, slots, tokens, B, out);
  if (!logits) {
    for (int b = 0; b < B; ++b) greedy[b] = argmax(out + static_cast<size_t>(b) * V, V);
  }
}

}  // namespace cohort::models::decode
