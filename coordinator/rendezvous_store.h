// RendezvousStore: the coordinator's key-value store for workers, one
// namespace per job attempt (so a restarted attempt never reads the keys of
// the attempt before it). Workers reach it through their agent's store proxy.
//
// Operations: set, get (blocks until the key exists or the timeout passes),
// add (integer as decimal text, like torch's TCPStore), wait (all keys),
// check (all keys exist, no blocking) and delete. A blocked request keeps its
// reply callback until a set/add resolves it, expire() times it out, or its
// namespace is dropped (then it fails with kAborted). Bounded: key and value
// sizes, keys per request, bytes per namespace and blocked requests per
// namespace (protocol/limits.h); add refuses to overflow.
//
// Not thread-safe: the coordinator's loop owns it. Time from the clock.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

class RendezvousStore {
 public:
  using Reply = std::function<void(Result<protocol::StoreReply>)>;

  explicit RendezvousStore(const Clock& clock, Clock::Duration default_timeout)
      : clock_(clock), default_timeout_(default_timeout) {}

  static std::string namespace_of(const std::string& job_id, int attempt) {
    return job_id + "/" + std::to_string(attempt);
  }

  // Answers now through `reply`, or later for a get/wait that must block.
  void handle(const protocol::StoreRequest& request, Reply reply);
  // Fails blocked requests whose deadline has passed.
  void expire();
  // Forgets a namespace and fails its blocked requests.
  void drop_namespace(const std::string& name);

  size_t pending() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string ns;
    std::vector<std::string> keys;
    bool want_value = false;  // get: reply with the value of keys[0]
    Clock::TimePoint deadline;
    Reply reply;
  };
  void wake(const std::string& ns);
  bool has_all(const std::map<std::string, std::string>& data,
               const std::vector<std::string>& keys) const;

  const Clock& clock_;
  Clock::Duration default_timeout_;
  static constexpr size_t kMaxWaitersPerNamespace = 4096;
  std::map<std::string, std::map<std::string, std::string>> data_;
  std::map<std::string, size_t> bytes_;  // keys + values per namespace, capped
  std::vector<Waiter> waiters_;
};

}  // namespace cohort::coordinator
