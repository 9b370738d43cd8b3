// Counter-based fills of a parameter slice (param_init.h).
#include "models/param_init.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "models/counter_random.h"

namespace cohort::models {
namespace {

// Counter-based, so threads can fill disjoint chunks (a Qwen3-0.6B embedding
// alone is 155M draws).
template <class Draw>
void fill(float* dst, const ParamSpec& p, const Draw& draw) {
  auto run = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) dst[i] = draw(global_index(p, i));
  };
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), p.numel / (1 << 20) + 1);
  if (threads == 1) return run(0, p.numel);
  std::vector<std::thread> pool;
  const size_t chunk = (p.numel + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back(run, t * chunk, std::min(p.numel, (t + 1) * chunk));
  for (auto& th : pool) th.join();
}

}  // namespace

uint64_t global_index(const ParamSpec& p, size_t i) {
  if (p.shape.size() == 1) return (p.shard_dim == ShardDim::kRows ? p.shard_begin : 0) + i;
  const uint64_t cols = static_cast<uint64_t>(p.shape[1]);
  const uint64_t gcols = static_cast<uint64_t>(p.global_shape[1]);
  uint64_t r = i / cols, c = i % cols;
  if (p.shard_dim == ShardDim::kRows) r += p.shard_begin;
  if (p.shard_dim == ShardDim::kCols) c += p.shard_begin;
  return r * gcols + c;
}

void fill_normal(float* dst, const ParamSpec& p, uint64_t stream, float stddev) {
  fill(dst, p, [&](uint64_t index) { return stddev * counter_normal(stream, index); });
}

void fill_uniform(float* dst, const ParamSpec& p, uint64_t stream, float bound) {
  fill(dst, p,
       [&](uint64_t index) { return bound * (2.0f * counter_uniform(stream, index) - 1.0f); });
}

}  // namespace cohort::models
