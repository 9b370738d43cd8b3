// GlooOpQueue: the thread that runs a GlooCommunicator's collectives in
// issue order, and the Work handles it completes.
//
// GlooFailure remembers the first failure: after a timeout or a lost peer,
// Gloo's pairs are in an unknown state, so every later operation fails at
// once instead of waiting out another timeout.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "collective/communicator.h"

namespace cohort::collective {

// A Work that some thread completes with complete(). Queued collectives
// need no deadline here (Gloo enforces theirs); a self-send waiting for its
// receive gets one through set_deadline().
class GlooWork final : public Work {
 public:
  Status wait() override {
    std::unique_lock lock(mu_);
    if (has_deadline_) {
      if (!cv_.wait_until(lock, deadline_, [this] { return done_; })) {
        done_ = true;
        status_ = on_timeout_;
      }
    } else {
      cv_.wait(lock, [this] { return done_; });
    }
    return status_;
  }
  void set_deadline(std::chrono::steady_clock::time_point deadline, Status on_timeout) {
    std::lock_guard lock(mu_);
    has_deadline_ = true;
    deadline_ = deadline;
    on_timeout_ = std::move(on_timeout);
  }
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return done_;
  }
  void complete(Status status) {
    {
      std::lock_guard lock(mu_);
      if (done_) return;  // timed out first
      status_ = std::move(status);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;                               // GUARDED_BY(mu_)
  Status status_;                                   // GUARDED_BY(mu_)
  bool has_deadline_ = false;                       // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point deadline_;  // GUARDED_BY(mu_)
  Status on_timeout_;                               // GUARDED_BY(mu_)
};

// Shared by a communicator, its queue and its pending send/recv Work (which
// may outlive the communicator).
class GlooFailure {
 public:
  Status get() {
    std::lock_guard lock(mu_);
    return first_;
  }
  void mark(const Status& why) {
    std::lock_guard lock(mu_);
    if (first_.is_ok()) {
      first_ = aborted("communicator is broken since an earlier failure: " + why.message());
    }
  }

 private:
  std::mutex mu_;
  Status first_;  // GUARDED_BY(mu_)
};

class GlooOpQueue {
 public:
  // `run` returns the operation's Status; the queue completes its Work.
  using Task = std::function<Status()>;

  GlooOpQueue() : thread_([this] { loop(); }) {}
  ~GlooOpQueue() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<Work> push(Task task) {
    auto work = std::make_shared<GlooWork>();
    {
      std::lock_guard lock(mu_);
      tasks_.emplace_back(std::move(task), work);
    }
    cv_.notify_all();
    return work;
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) {
        // Destroyed with operations pending: fail them rather than block
        // the destructor for a timeout each.
        for (auto& [task, work] : tasks_) work->complete(aborted("communicator destroyed"));
        tasks_.clear();
        return;
      }
      auto [task, work] = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      work->complete(task());
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Task, std::shared_ptr<GlooWork>>> tasks_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                                         // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace cohort::collective
