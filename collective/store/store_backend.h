// StoreBackend: what a TcpStoreServer serves, written so answers may come
// later and from another thread.
//
// The server hands each request to a backend together with a completion
// callback. MemoryStoreBackend answers from a map in this process; the agent
// implements its own backend that forwards to the coordinator and calls
// `done` when the coordinator replies. Blocking operations (get, wait) keep
// their callback until the key appears or the timeout passes; the backend,
// not the server, owns that timeout.
//
// Contract: every call completes exactly once by invoking its callback, from
// any thread, possibly before the call returns. Callbacks must not block.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "collective/store/store.h"

namespace cohort::store {

class StoreBackend {
 public:
  using Done = std::function<void(Status)>;
  using ValueDone = std::function<void(Result<std::string>)>;
  using AddDone = std::function<void(Result<int64_t>)>;

  virtual ~StoreBackend() = default;
  virtual void set(const std::string& key, std::string value, Done done) = 0;
  virtual void get(const std::string& key, Milliseconds timeout, ValueDone done) = 0;
  virtual void add(const std::string& key, int64_t delta, AddDone done) = 0;
  virtual void wait(std::vector<std::string> keys, Milliseconds timeout, Done done) = 0;
};

// Keys in memory; blocked requests wait in a list that set/add and a timer
// thread resolve. Thread-safe.
class MemoryStoreBackend final : public StoreBackend {
 public:
  MemoryStoreBackend();
  ~MemoryStoreBackend() override;  // fails every pending request (kAborted)

  void set(const std::string& key, std::string value, Done done) override;
  void get(const std::string& key, Milliseconds timeout, ValueDone done) override;
  void add(const std::string& key, int64_t delta, AddDone done) override;
  void wait(std::vector<std::string> keys, Milliseconds timeout, Done done) override;

 private:
  struct Waiter {
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point deadline;
    // Called with ok once all keys exist, or with the timeout error.
    std::function<void(Status)> fire;
  };
  // Moves the waiters whose keys all exist (or whose deadline passed) out
  // of `waiters_`; the caller fires them after unlocking.
  std::vector<std::pair<Waiter, Status>> take_ready_locked();
  void timer_loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;  // GUARDED_BY(mu_)
  std::vector<Waiter> waiters_;              // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::thread timer_;
};

// A blocking Store over any backend: each call waits for its callback.
class BackendStore final : public Store {
 public:
  explicit BackendStore(std::shared_ptr<StoreBackend> backend) : backend_(std::move(backend)) {}
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, Milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, Milliseconds timeout) override;

 private:
  std::shared_ptr<StoreBackend> backend_;
};

// An in-process store (tests, single-process runs).
std::shared_ptr<Store> make_memory_store();

// The message every timed-out get/wait carries, naming the missing keys.
Status store_timeout_error(const std::vector<std::string>& keys, Milliseconds timeout);

}  // namespace cohort::store
