// OpTimes: GPU time per backend op, from a pair of CUDA events around each
// call, for finding where a step's time goes without an external profiler.
// Off unless COHORT_CUDA_OP_TIMES=1 (the events cost a little per op).
// Events are recycled: when many are pending the totals are collected,
// which synchronises the stream. A scope owns its events until it ends, so
// scopes may nest (an op's time then counts in its own name and in the
// enclosing one's) and a collect inside one leaves the open ones alone.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cohort::models::cuda {

class OpTimes {
  struct Pending {  // one op's events; a Scope's until it ends
    const char* name;
    cudaEvent_t start, stop;
  };

 public:
  explicit OpTimes(bool enabled) : enabled_(enabled) {}
  ~OpTimes() {
    for (auto& p : pending_) free_.insert(free_.end(), {p.start, p.stop});
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  // Marks one op on `stream` for as long as it lives.
  class Scope {
   public:
    Scope(OpTimes* times, const char* name, cudaStream_t stream) : times_(times), stream_(stream) {
      if (times_->enabled_) open_ = times_->begin(name, stream_);
    }
    ~Scope() {
      if (times_->enabled_) times_->end(open_, stream_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTimes* times_;
    cudaStream_t stream_;
    Pending open_{};
  };

  // Milliseconds per op name since the start, largest first.
  std::vector<std::pair<std::string, double>> totals(cudaStream_t stream) {
    collect(stream);
    std::vector<std::pair<std::string, double>> out(totals_.begin(), totals_.end());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }

 private:
  cudaEvent_t take() {
    if (free_.empty()) {
      cudaEvent_t e;
      cudaEventCreate(&e);
      return e;
    }
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  Pending begin(const char* name, cudaStream_t stream) {
    Pending p{name, take(), take()};
    cudaEventRecord(p.start, stream);
    return p;
  }
  void end(const Pending& p, cudaStream_t stream) {
    cudaEventRecord(p.stop, stream);
    pending_.push_back(p);
    if (pending_.size() >= 4096) collect(stream);
  }
  void collect(cudaStream_t stream) {
    cudaStreamSynchronize(stream);
    for (auto& p : pending_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) totals_[p.name] += ms;
      free_.insert(free_.end(), {p.start, p.stop});
    }
    pending_.clear();
  }

  bool enabled_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, double> totals_;
};

}  // namespace cohort::models::cuda
