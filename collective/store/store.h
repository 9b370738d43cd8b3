// Store: the key-value rendezvous that ranks use to find each other.
//
// Every way into a job (cohort's agent, a torchrun-style rank 0, a test
// driver) hands workers a Store; Gloo exchanges its addresses through it and
// NCCL's unique id travels through it. Values are opaque bytes.
//
// Threading: implementations are safe to call from several threads at once.
// Errors: kTimeout when a key did not appear in time, kUnavailable when the
// server cannot be reached, kInvalidArgument for a malformed value (add on a
// key that holds no integer).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::store {

using Milliseconds = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, waking every get/wait blocked on it.
  virtual Status set(const std::string& key, const std::string& value) = 0;

  // The value of `key`, blocking until it is set or `timeout` passes.
  virtual Result<std::string> get(const std::string& key, Milliseconds timeout) = 0;

  // Adds `delta` to the integer held by `key` (0 when absent) and returns the
  // sum. The value is stored as decimal text, so get() reads it back.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;

  // Blocks until every key in `keys` is set, or fails after `timeout`.
  virtual Status wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
};

// A view of another store with every key prefixed by `prefix` + "/": one
// namespace per job attempt, per communicator, per split.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}

  Status set(const std::string& key, const std::string& value) override {
    return base_->set(prefix_ + key, value);
  }
  Result<std::string> get(const std::string& key, Milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  Status wait(const std::vector<std::string>& keys, Milliseconds timeout) override {
    std::vector<std::string> prefixed;
    prefixed.reserve(keys.size());
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    return base_->wait(prefixed, timeout);
  }
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace cohort::store
