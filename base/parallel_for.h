// parallel_for: body(i) for i in [0, count) over up to `threads` threads (0:
// the machine's cores), the calling thread among them; returns when all are
// done. For independent pieces of one bulk job (converting a model's weights
// as it loads), not a pool: threads start and end with each call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace cohort {

template <typename Body>
void parallel_for(size_t count, Body&& body, size_t threads = 0) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, count);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace cohort
