// Seeded random token ids, the inputs most model tests train and decode on.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace cohort::testing {

inline std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

}  // namespace cohort::testing
