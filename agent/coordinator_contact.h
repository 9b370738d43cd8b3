// CoordinatorContact: what an agent knows of its link to the coordinator,
// and the lease that tells it when to stop its workers (self-fencing).
//
// The coordinator declares a node lost once no heartbeat has arrived for
// heartbeat_timeout, and may then start the node's attempts elsewhere. Its
// answer to a heartbeat proves it had heard from the node no earlier than
// that heartbeat's send time, so it cannot declare the node lost before
// send time + heartbeat_timeout: the agent's lease ends there, and the agent
// stops its workers by then. A partitioned node therefore never keeps
// running an attempt the coordinator has replaced.
//
// Evidence that the coordinator process is gone extends the lease to that
// moment + recovery_grace: a coordinator that is not running replaces
// nothing, and one that starts later waits recovery_grace for its agents
// before it restarts any attempt, so a coordinator restart does not stop
// every job. The evidence: the coordinator's side closed an established
// connection (its process died: the kernel closes its sockets), or a probe
// found nothing listening on its port. A partition gives neither; a
// firewall that rejects instead of dropping looks like a stopped
// coordinator (drop packets to partition a node). While silent the agent
// probes early enough (probe_due) that a refusal is seen before the lease
// ends.
//
// States and transitions:
//   kConnecting --registration answered--> kInContact
//   kInContact  --no answer for silent_after()--> kSilent
//   kSilent     --an answer--> kInContact
//   kSilent     --lease ended--> kFenced   (the agent stops its workers)
//   kFenced     --an answer--> kInContact  (the agent registers again, or
//                                           the coordinator never lost it)
// Without a lease (an older coordinator that does not answer heartbeats)
// kSilent never becomes kFenced.
//
// Not thread-safe: the agent's io_context thread owns it. Time comes from
// the injected clock.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "base/clock.h"

namespace cohort::agent {

enum class ContactState { kConnecting, kInContact, kSilent, kFenced };
const char* to_string(ContactState state);

class CoordinatorContact {
 public:
  explicit CoordinatorContact(const Clock& clock);

  // From the coordinator's registration answer. heartbeat_timeout zero: no
  // lease (an older coordinator that does not answer heartbeats).
  void set_lease(Clock::Duration heartbeat_interval, Clock::Duration heartbeat_timeout,
                 Clock::Duration recovery_grace);
  Clock::Duration heartbeat_timeout() const { return heartbeat_timeout_; }
  // Silence: no answer for 1.5 heartbeat intervals (half the lease at most;
  // 1 s before the first registration).
  Clock::Duration silent_after() const;
  // True when a probe of the coordinator's port is due: silent, and the
  // last probe began long enough ago (1 s; half the lease at most).
  bool probe_due(Clock::TimePoint last_probe) const;

  // A heartbeat or registration with envelope id `id` went out now.
  void sent(uint64_t id);
  // The coordinator acknowledged request `id`; false when `id` was not
  // pending (a stray or forgotten id: it renews nothing).
  bool answered(uint64_t id);
  // The coordinator process is gone (see above).
  void coordinator_gone();
  // Applies the time-driven transitions; returns true when the state changed.
  bool update();

  ContactState state() const { return state_; }
  // Since the last answer, or since construction before the first one.
  Clock::Duration silence() const { return clock_.now() - last_answer_; }
  // Time left until the lease ends (negative once ended); max() without a lease.
  Clock::Duration lease_left() const;
  // When the agent fell silent or fenced: how long the last cut-off lasted,
  // measured when contact came back (zero if it never was cut off).
  Clock::Duration last_outage() const { return last_outage_; }

 private:
  static constexpr size_t kMaxPending = 256;  // ~2 min of heartbeats at 0.5 s

  const Clock& clock_;
  ContactState state_ = ContactState::kConnecting;
  Clock::Duration heartbeat_interval_{std::chrono::milliseconds(500)};
  Clock::Duration heartbeat_timeout_{0};
  Clock::Duration recovery_grace_{0};
  std::deque<std::pair<uint64_t, Clock::TimePoint>> pending_;  // id, send time; ids ascending
  Clock::TimePoint lease_from_{};  // send time of the last answered request
  Clock::TimePoint gone_at_{};     // the last sign that the coordinator process was gone
  Clock::TimePoint last_answer_{};
  Clock::Duration last_outage_{0};
};

}  // namespace cohort::agent
