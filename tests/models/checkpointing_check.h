// The check every model family's activation checkpointing passes: it
// changes what is kept, never what is computed.
#pragma once

#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "models/backend.h"
#include "models/model.h"
#include "tests/models/random_tokens.h"

namespace cohort::testing {

// Two training steps of `c` (batch 3 x 8 tokens, weights from seed 17 at
// `init_stddev`) in each checkpointing mode on the CPU backend, which is
// deterministic: the losses and every gradient equal the run that keeps
// everything, bit for bit (the second step recomputes after a reused
// arena), and the activation memory shrinks none > selective > full.
inline void expect_checkpointing_keeps_the_gradients(const models::ModelConfig& c, float init_stddev = 0.02f) {
  using models::ActivationCheckpointing;
  auto backend = models::make_cpu_backend();
  const int B = 3, T = 8;
  std::vector<std::vector<float>> want;
  size_t bytes[3] = {};
  for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                    ActivationCheckpointing::kFull}) {
    SCOPED_TRACE(to_string(mode));
    auto model = std::move(models::Model::create(c, {}, backend.get()).value());
    model->init_weights(17, init_stddev);
    model->set_activation_checkpointing(mode);
    std::vector<std::vector<float>> got;
    for (int step = 0; step < 2; ++step) {
      const auto tokens = random_tokens(B * T, c.vocab_size, 30 + step);
      const auto targets = random_tokens(B * T, c.vocab_size, 40 + step);
      const models::LossSum loss = model->forward(tokens.data(), targets.data(), B, T);
      model->backward(1.0f / loss.count);
      got.push_back({static_cast<float>(loss.sum)});
    }
    for (int g = 0; g < model->num_groups(); ++g) {
      got.emplace_back(model->grads(g), model->grads(g) + model->layout().groups[g].numel);
    }
    bytes[static_cast<int>(mode)] = model->activation_bytes();
    if (mode == ActivationCheckpointing::kNone) {
      want = got;
    } else {
      EXPECT_EQ(got, want);
    }
  }
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_LT(bytes[2], bytes[1]);
}

}  // namespace cohort::testing
