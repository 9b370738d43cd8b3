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
template <class Run>
void parallel_chunks(size_t numel, const Run& run) {
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), numel / (1 << 20) + 1);
  if (threads == 1) return run(size_t{0}, numel);
  std::vector<std::thread> pool;
  const size_t chunk = (numel + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(run, t * chunk, std::min(numel, (t + 1) * chunk));
  for (auto& th : pool) th.join();
}

template <class Draw>
void fill(float* dst, const ParamSpec& p, const Draw& draw) {
  parallel_chunks(p.numel, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) dst[i] = draw(global_index(p, i));
  });
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

void fill_normal_range(float* dst, const ParamSpec& p, uint64_t stream, float stddev, size_t begin, size_t end) {
  // A local row's global indices are consecutive: each run of them from one
  // global_index(), and whole index pairs from one draw each
  // (counter_normal_pair); a pair a row or a slice cuts, one value at a time.
  const size_t row = p.shape.size() == 2 ? static_cast<size_t>(p.shape[1]) : p.numel;
  for (size_t i = begin; i < end;) {
    const size_t run_end = std::min(end, (i / row + 1) * row);
    uint64_t g = global_index(p, i);
    size_t j = i;
    if (g % 2 == 1) dst[j++] = stddev * counter_normal(stream, g++);
    for (; j + 1 < run_end; j += 2, g += 2) {
      float even, odd;
      counter_normal_pair(stream, g >> 1, &even, &odd);
      dst[j] = stddev * even, dst[j + 1] = stddev * odd;
    }
    if (j < run_end) dst[j] = stddev * counter_normal(stream, g);
    i = run_end;
  }
}

void fill_normal(float* dst, const ParamSpec& p, uint64_t stream, float stddev) {
  parallel_chunks(p.numel,
                  [&](size_t begin, size_t end) { fill_normal_range(dst, p, stream, stddev, begin, end); });
}

void fill_uniform(float* dst, const ParamSpec& p, uint64_t stream, float bound) {
  fill(dst, p,
       [&](uint64_t index) { return bound * (2.0f * counter_uniform(stream, index) - 1.0f); });
}

}  // namespace cohort::models
