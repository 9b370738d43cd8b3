// MemoryStoreBackend and BackendStore: the in-memory store, asynchronous at
// its core so that the TCP server (and the agent's proxy) can reuse it.
#include <future>
#include <string>

#include "collective/store/store_backend.h"

namespace cohort::store {

Status store_timeout_error(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::string names;
  for (const auto& k : keys) {
    if (!names.empty()) names += ", ";
    names += "'" + k + "'";
  }
  return timeout_error("store: key(s) " + names + " not set within " +
                       std::to_string(timeout.count()) + " ms");
}

MemoryStoreBackend::MemoryStoreBackend() : timer_([this] { timer_loop(); }) {}

MemoryStoreBackend::~MemoryStoreBackend() {
  std::vector<Waiter> pending;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    pending.swap(waiters_);
  }
  cv_.notify_all();
  timer_.join();
  for (auto& w : pending) w.fire(aborted("store: shutting down"));
}

std::vector<std::pair<MemoryStoreBackend::Waiter, Status>> MemoryStoreBackend::take_ready_locked() {
  std::vector<std::pair<Waiter, Status>> ready;
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < waiters_.size();) {
    bool all = true;
    for (const auto& k : waiters_[i].keys) all = all && data_.count(k) > 0;
    if (all || now >= waiters_[i].deadline) {
      // A timed-out waiter's fire() replaces this with its own message.
      Status s = all ? Status::ok() : timeout_error("");
      ready.emplace_back(std::move(waiters_[i]), s);
      waiters_.erase(waiters_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return ready;
}

void MemoryStoreBackend::timer_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto next = std::chrono::steady_clock::time_point::max();
    for (const auto& w : waiters_) next = std::min(next, w.deadline);
    if (next == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, next);
    }
    if (stopping_) break;
    auto ready = take_ready_locked();
    lock.unlock();
    for (auto& [w, s] : ready) w.fire(s);
    lock.lock();
  }
}

void MemoryStoreBackend::set(const std::string& key, std::string value, Done done) {
  std::vector<std::pair<Waiter, Status>> ready;
  {
    std::lock_guard lock(mu_);
    data_[key] = std::move(value);
    ready = take_ready_locked();
  }
  for (auto& [w, s] : ready) w.fire(s);
  done(Status::ok());
}

void MemoryStoreBackend::add(const std::string& key, int64_t delta, AddDone done) {
  std::vector<std::pair<Waiter, Status>> ready;
  int64_t sum = 0;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      size_t used = 0;
      try {
        sum = std::stoll(it->second, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != it->second.size()) {
        done(invalid_argument("store: add on key '" + key + "' whose value is not an integer"));
        return;
      }
    }
    sum += delta;
    data_[key] = std::to_string(sum);
    ready = take_ready_locked();
  }
  for (auto& [w, s] : ready) w.fire(s);
  done(sum);
}

void MemoryStoreBackend::wait(std::vector<std::string> keys, Milliseconds timeout, Done done) {
  Waiter w;
  w.deadline = std::chrono::steady_clock::now() + timeout;
  w.fire = [keys, timeout, done = std::move(done)](Status s) {
    done(s.code() == StatusCode::kTimeout ? store_timeout_error(keys, timeout) : s);
  };
  w.keys = std::move(keys);
  {
    std::lock_guard lock(mu_);
    bool all = true;
    for (const auto& k : w.keys) all = all && data_.count(k) > 0;
    if (!all && !stopping_) {
      waiters_.push_back(std::move(w));
      cv_.notify_all();  // the timer may need to wake earlier
      return;
    }
    if (stopping_) {
      w.fire(aborted("store: shutting down"));
      return;
    }
  }
  w.fire(Status::ok());
}

void MemoryStoreBackend::get(const std::string& key, Milliseconds timeout, ValueDone done) {
  // A get is a wait for one key followed by a read; the read happens in the
  // callback so that the value is the one that satisfied the wait.
  wait({key}, timeout, [this, key, done = std::move(done)](Status s) {
    if (!s.is_ok()) {
      done(s);
      return;
    }
    std::string value;
    {
      std::lock_guard lock(mu_);
      auto it = data_.find(key);
      if (it == data_.end()) {
        done(internal_error("store: key '" + key + "' vanished"));
        return;
      }
      value = it->second;
    }
    done(std::move(value));
  });
}

namespace {
template <typename T>
struct Completion {
  std::promise<T> promise;
  std::future<T> future = promise.get_future();
};
}  // namespace

Status BackendStore::set(const std::string& key, const std::string& value) {
  auto c = std::make_shared<Completion<Status>>();
  backend_->set(key, value, [c](Status s) { c->promise.set_value(std::move(s)); });
  return c->future.get();
}

Result<std::string> BackendStore::get(const std::string& key, Milliseconds timeout) {
  auto c = std::make_shared<Completion<Result<std::string>>>();
  backend_->get(key, timeout, [c](Result<std::string> r) { c->promise.set_value(std::move(r)); });
  return c->future.get();
}

Result<int64_t> BackendStore::add(const std::string& key, int64_t delta) {
  auto c = std::make_shared<Completion<Result<int64_t>>>();
  backend_->add(key, delta, [c](Result<int64_t> r) { c->promise.set_value(std::move(r)); });
  return c->future.get();
}

Status BackendStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  auto c = std::make_shared<Completion<Status>>();
  backend_->wait(keys, timeout, [c](Status s) { c->promise.set_value(std::move(s)); });
  return c->future.get();
}

std::shared_ptr<Store> make_memory_store() {
  return std::make_shared<BackendStore>(std::make_shared<MemoryStoreBackend>());
}

}  // namespace cohort::store
