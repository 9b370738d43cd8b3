// Helpers of the Hugging Face folder tests: collectives for loading a
// shard in one process, a parameter group's values, and the check that each
// rank's loaded shard is the slice a fresh initialisation gives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hf/weights.h"
#include "models/model.h"
#include "models/tensor_parallel.h"

namespace cohort::testing {

// Collectives that do nothing: each rank's shard loaded on its own, in one
// process, needs none of them.
inline models::TensorParallelComm no_collectives() {
  models::TensorParallelComm none;
  none.all_reduce_sum = none.all_reduce_max = [](float*, size_t) {};
  none.all_gather = [](const float*, float*, size_t) {};
  return none;
}

inline std::vector<float> group_values(const models::Model& m, int g) {
  return std::vector<float>(m.params(g), m.params(g) + m.layout().groups[g].numel);
}

// Each of `world` ranks' shards of the folder `dir` equals the shard of `c`
// initialised from `seed` (initialisation is slice-consistent, so a fresh
// shard is the reference for a loaded one).
inline void expect_loaded_shards_are_fresh_slices(const std::string& dir, const models::ModelConfig& c, int world,
                                                  uint64_t seed, models::Backend* backend) {
  const models::TensorParallelComm none = no_collectives();
  for (int rank = 0; rank < world; ++rank) {
    auto shard = hf::load_model(dir, {rank, world}, backend, none);
    ASSERT_TRUE(shard.is_ok()) << shard.status().to_string();
    auto ref = std::move(models::Model::create(c, {rank, world}, backend, none).value());
    ref->init_weights(seed);
    for (int g = 0; g < ref->num_groups(); ++g) {
      EXPECT_EQ(group_values(*ref, g), group_values(**shard, g)) << "rank " << rank << " of " << world << ", group " << g;
    }
  }
}

}  // namespace cohort::testing
