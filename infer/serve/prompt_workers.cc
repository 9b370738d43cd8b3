// The prompt thread pool (see prompt_workers.h).
#include "infer/serve/prompt_workers.h"

#include <algorithm>

namespace cohort::infer {

PromptWorkers::PromptWorkers(const text::Tokenizer* tokenizer, int threads, size_t max_pending)
    : max_pending_(max_pending) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    tokenizers_.push_back(tokenizer ? tokenizer->clone() : nullptr);
    threads_.emplace_back([this, t = tokenizers_.back().get()] { run(t); });
  }
}

PromptWorkers::~PromptWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    pending_.clear();
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool PromptWorkers::post(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || pending_.size() >= max_pending_) return false;
    pending_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void PromptWorkers::run(text::Tokenizer* tokenizer) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      job = std::move(pending_.front());
      pending_.pop_front();
    }
    job(tokenizer);
  }
}

}  // namespace cohort::infer
