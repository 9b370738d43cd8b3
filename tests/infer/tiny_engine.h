// The CPU engine over the "tiny" preset with fixed weights (seed 5, stddev
// 0.2, so that greedy choices are clear), for scheduler and generation
// tests, and the requests they queue.
#pragma once

#include <algorithm>
#include <memory>

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
