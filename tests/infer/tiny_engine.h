// The CPU engine over the "tiny" preset with fixed weights (seed 5, stddev
// 0.2, so that greedy choices are clear), for scheduler and generation
// tests, and the requests they queue.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "models/decode/engine.h"
#include "infer/scheduler.h"

namespace cohort::testing {

inline std::unique_ptr<models::decode::ModelEngine> tiny_engine(int slots, int capacity = 96) {
  auto config = models::preset_config("tiny");
  config->max_seq = std::max(config->max_seq, capacity);  // the weights do not depend on it
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(*config, {0, 1}, backend.get());
  EXPECT_TRUE(model.is_ok());
  (*model)->init_weights(5, 0.2f);
  auto engine = models::decode::ModelEngine::create(std::move(backend), std::move(*model), slots, capacity);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  return std::move(*engine);
}

// An engine that passes every call to the CPU engine it holds: the base
// of test engines that record what the scheduler asks for.
class ForwardingEngine : public models::decode::InferenceEngine {
 public:
  explicit ForwardingEngine(std::unique_ptr<models::decode::ModelEngine> inner) : inner_(std::move(inner)) {}
  int vocab_size() const override { return inner_->vocab_size(); }
  int slots() const override { return inner_->slots(); }
  int capacity() const override { return inner_->capacity(); }
  std::string describe() const override { return "recorded " + inner_->describe(); }
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    inner_->prefill(slot, tokens, n, logits, greedy);
  }
  void decode(const int* slots, const int32_t* tokens, int B, float* logits, int32_t* greedy) override {
    inner_->decode(slots, tokens, B, logits, greedy);
  }
  bool can_extend() const override { return true; }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    inner_->extend(slot, tokens, n, logits, greedy);
  }

 private:
  std::unique_ptr<models::decode::ModelEngine> inner_;
};

// A request of `prompt_len` byte tokens that depend on its id, for at most
// `max_new` new tokens.
inline infer::SequenceRequest request(int64_t id, int prompt_len, int max_new) {
  infer::SequenceRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>((id * 31 + i * 7) % 256));
  r.max_new_tokens = max_new;
  return r;
}

}  // namespace cohort::testing
