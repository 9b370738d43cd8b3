// One background thread, one batch ahead.
#include "data/batch_prefetcher.h"

namespace cohort::data {

BatchPrefetcher::BatchPrefetcher(BatchSampler* sampler, int64_t first, int64_t count)
    : sampler_(sampler), first_(first), count_(count), thread_([this] { run(); }) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchPrefetcher::prepare(int64_t step, RankBatch* out) {
  const size_t n = size_t(count_) * size_t(sampler_->options().seq_len);
  out->inputs.resize(n);
  out->targets.resize(n);
  out->step = step;
  out->status = sampler_->fill(step, first_, count_, out->inputs.data(), out->targets.data());
  out->counted_targets = out->status.is_ok() ? sampler_->counted_targets(step) : 0;
}

void BatchPrefetcher::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || (want_ >= 0 && !ready_); });
    if (quit_) return;
    const int64_t step = want_;
    lock.unlock();
    RankBatch batch;
    batch.inputs.swap(next_.inputs);  // reuse the buffers
    batch.targets.swap(next_.targets);
    prepare(step, &batch);
    lock.lock();
    if (want_ == step) {
      next_ = std::move(batch);
      ready_ = true;
      cv_.notify_all();
    }
  }
}

const RankBatch& BatchPrefetcher::take(int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  if (want_ != step) {
    want_ = step;
    ready_ = false;
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return ready_ && next_.step == step; });
  std::swap(current_, next_);
  want_ = step + 1;
  ready_ = false;
  cv_.notify_all();
  return current_;
}

}  // namespace cohort::data
