// An in-process tensor-parallel group for tests: one thread per rank, the
// callbacks of TensorParallelComm implemented over shared memory and a
// barrier. Each rank must call the collectives in the same order, as with a
// real communicator.
#pragma once

#include <barrier>
#include <functional>
#include <thread>
#include <vector>

#include "models/tensor_parallel.h"

namespace cohort::models::testing {

class ThreadTpGroup {
 public:
  explicit ThreadTpGroup(int size) : size_(size), barrier_(size), ptrs_(size) {}

  TensorParallelComm comm(int rank) {
    TensorParallelComm c;
    c.all_reduce_sum = [this, rank](float* d, size_t n) { reduce(rank, d, n, false); };
    c.all_reduce_max = [this, rank](float* d, size_t n) { reduce(rank, d, n, true); };
    c.all_gather = [this, rank](const float* local, float* out, size_t n) {
      ptrs_[rank] = local;
      barrier_.arrive_and_wait();
      for (int r = 0; r < size_; ++r) std::copy(ptrs_[r], ptrs_[r] + n, out + r * n);
      barrier_.arrive_and_wait();
    };
    return c;
  }

  // Runs body(rank) on one thread per rank and joins them.
  void run(const std::function<void(int rank)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

 private:
  void reduce(int rank, float* data, size_t n, bool max) {
    ptrs_[rank] = data;
    barrier_.arrive_and_wait();
    std::vector<float> out(ptrs_[0], ptrs_[0] + n);
    for (int r = 1; r < size_; ++r) {
      for (size_t i = 0; i < n; ++i)
        out[i] = max ? std::max(out[i], ptrs_[r][i]) : out[i] + ptrs_[r][i];
    }
    barrier_.arrive_and_wait();  // everyone has read before anyone writes
    std::copy(out.begin(), out.end(), data);
    barrier_.arrive_and_wait();
  }

  int size_;
  std::barrier<> barrier_;
  std::vector<const float*> ptrs_;
};

}  // namespace cohort::models::testing
