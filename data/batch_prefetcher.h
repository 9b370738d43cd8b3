// Prepares a rank's next batch on a background thread while the current
// step computes: reading windows from the mapped shards (page faults
// included) and building the targets happen off the training thread.
//
// Threading: once constructed, the sampler's fill() and counted_targets()
// are called only from the prefetch thread; its step counter stays the
// trainer's. take() is called from one thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "data/batch_sampler.h"

namespace cohort::data {

struct RankBatch {
  int64_t step = -1;
  std::vector<int32_t> inputs, targets;  // count × seq_len each
  int64_t counted_targets = 0;           // over the whole global batch
  Status status;
};

class BatchPrefetcher {
 public:
  // This rank's sequences [first, first + count) of every global batch.
  BatchPrefetcher(BatchSampler* sampler, int64_t first, int64_t count);
  ~BatchPrefetcher();
  // The batch of sampler step `step`; then starts on step + 1. The returned
  // batch stays valid until the next take().
  const RankBatch& take(int64_t step);

 private:
  void run();
  void prepare(int64_t step, RankBatch* out);

  BatchSampler* sampler_;
  int64_t first_, count_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t want_ = -1;   // GUARDED_BY(mu_): the step to prepare next
  bool ready_ = false;  // GUARDED_BY(mu_): next_ holds want_'s batch
  bool quit_ = false;   // GUARDED_BY(mu_)
  RankBatch next_, current_;
  std::thread thread_;
};

}  // namespace cohort::data
