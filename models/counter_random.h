// Counter-based random draws: every value is a pure function of (stream,
// index), so any slice of a tensor (a tensor-parallel shard, a chunk a thread
// fills, a CUDA thread's element) is drawn without the rest, the same on
// every rank and backend. Initialisation (Model::init_weights, LoRA's A) and
// dropout masks (ops/dropout.h) draw from here. Host and device code.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#ifdef __CUDACC__
#define COHORT_RANDOM_FN __host__ __device__ inline
#else
#define COHORT_RANDOM_FN inline
#endif

namespace cohort::models {

COHORT_RANDOM_FN uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream per parameter: FNV-1a of its name.
inline uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A standard normal. Box-Muller on one 64-bit hash per index pair; even
// indices take the cosine, odd the sine.
inline float counter_normal(uint64_t stream, uint64_t index) {
  const uint64_t h = splitmix64(stream ^ ((index >> 1) * 0xd1b54a32d192ed03ull));
  const float u1 = static_cast<float>((h >> 40) + 1) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float angle = 6.2831853071795865f * u2;
  return (index & 1) ? r * std::sin(angle) : r * std::cos(angle);
}

// Both values of an index pair (2 pair, 2 pair + 1), each what
// counter_normal gives, from one hash, logarithm and root: what a fill of
// whole pairs takes (a 70B model draws some 10^9 values a layer).
inline void counter_normal_pair(uint64_t stream, uint64_t pair, float* even, float* odd) {
  const uint64_t h = splitmix64(stream ^ (pair * 0xd1b54a32d192ed03ull));
  const float u1 = static_cast<float>((h >> 40) + 1) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float angle = 6.2831853071795865f * u2;
  *even = r * std::cos(angle);
  *odd = r * std::sin(angle);
}

// Uniform in [0, 1), 24 bits.
COHORT_RANDOM_FN float counter_uniform(uint64_t stream, uint64_t index) {
  const uint64_t h = splitmix64(stream ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

}  // namespace cohort::models
