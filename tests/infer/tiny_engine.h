// The CPU engine over the "tiny" preset with fixed weights (seed 5, stddev
// 0.2, so that greedy choices are clear), for scheduler and generation tests.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "infer/engine.h"

namespace cohort::testing {

inline std::unique_ptr<infer::ModelEngine> tiny_engine(int slots, int capacity) {
  auto config = models::preset_config("tiny");
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(*config, {0, 1}, backend.get());
  EXPECT_TRUE(model.is_ok());
  (*model)->init_weights(5, 0.2f);
  auto engine = infer::ModelEngine::create(std::move(backend), std::move(*model), slots, capacity);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  return std::move(*engine);
}

}  // namespace cohort::testing
