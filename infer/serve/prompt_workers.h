// Prompts are rendered and tokenized off the server's HTTP thread: their
// cost grows with the request (a 1 MB prompt, a chat template near its
// limits), and the HTTP thread also answers /health and streams every other
// request's tokens. A fixed pool of threads, each with its own tokenizer
// (text::Tokenizer::encode keeps a per-instance cache), takes the work; at
// most `max_pending` requests wait for a thread, beyond that post() refuses
// (the caller answers 503) so a flood cannot queue without bound.
//
// Threading: post() from any thread. Jobs run on the pool's threads; the
// destructor drops jobs that have not started and joins the threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "text/tokenizer.h"

namespace cohort::infer {

class PromptWorkers {
 public:
  // The job gets this thread's tokenizer (null when the model has none).
  using Job = std::function<void(text::Tokenizer* tokenizer)>;

  PromptWorkers(const text::Tokenizer* tokenizer, int threads, size_t max_pending);
  ~PromptWorkers();
  PromptWorkers(const PromptWorkers&) = delete;
  PromptWorkers& operator=(const PromptWorkers&) = delete;

  // False (and `job` dropped) when max_pending jobs are waiting already.
  bool post(Job job);

 private:
  void run(text::Tokenizer* tokenizer);

  const size_t max_pending_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> pending_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::vector<std::unique_ptr<text::Tokenizer>> tokenizers_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::infer
