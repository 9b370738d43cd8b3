// CoordinatorContact: answers, silence and the fencing lease.
#include "agent/coordinator_contact.h"

#include <algorithm>

namespace cohort::agent {

const char* to_string(ContactState state) {
  switch (state) {
    case ContactState::kConnecting:
      return "connecting";
    case ContactState::kInContact:
      return "in contact";
    case ContactState::kSilent:
      return "silent";
    case ContactState::kFenced:
      return "fenced";
  }
  return "unknown";
}

CoordinatorContact::CoordinatorContact(const Clock& clock)
    : clock_(clock), lease_from_(clock.now()), last_answer_(clock.now()) {}

void CoordinatorContact::set_lease(Clock::Duration heartbeat_interval,
                                   Clock::Duration heartbeat_timeout,
                                   Clock::Duration recovery_grace) {
  heartbeat_interval_ =
      std::max(Clock::Duration(std::chrono::milliseconds(10)), heartbeat_interval);
  heartbeat_timeout_ = std::max(Clock::Duration(0), heartbeat_timeout);
  recovery_grace_ = std::max(heartbeat_timeout_, recovery_grace);
}

Clock::Duration CoordinatorContact::silent_after() const {
  if (heartbeat_timeout_ == Clock::Duration(0)) return std::chrono::seconds(1);
  return std::min(heartbeat_interval_ * 3 / 2, heartbeat_timeout_ / 2);
}

bool CoordinatorContact::probe_due(Clock::TimePoint last_probe) const {
  Clock::Duration every = std::chrono::seconds(1);
  if (heartbeat_timeout_ > Clock::Duration(0)) every = std::min(every, heartbeat_timeout_ / 2);
  return silence() >= silent_after() && clock_.now() - last_probe >= every;
}

void CoordinatorContact::sent(uint64_t id) {
  pending_.emplace_back(id, clock_.now());
  if (pending_.size() > kMaxPending) pending_.pop_front();
}

bool CoordinatorContact::answered(uint64_t id) {
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [id](const auto& p) { return p.first == id; });
  if (it == pending_.end()) return false;
  lease_from_ = std::max(lease_from_, it->second);
  pending_.erase(pending_.begin(), std::next(it));  // earlier ones will not renew more
  auto now = clock_.now();
  if (state_ == ContactState::kSilent || state_ == ContactState::kFenced)
    last_outage_ = now - last_answer_;
  last_answer_ = now;
  state_ = ContactState::kInContact;
  return true;
}

void CoordinatorContact::coordinator_gone() {
  gone_at_ = clock_.now();
}

Clock::Duration CoordinatorContact::lease_left() const {
  if (heartbeat_timeout_ == Clock::Duration(0)) return Clock::Duration::max();
  auto end = lease_from_ + heartbeat_timeout_;
  if (gone_at_ != Clock::TimePoint{}) end = std::max(end, gone_at_ + recovery_grace_);
  return end - clock_.now();
}

bool CoordinatorContact::update() {
  ContactState before = state_;
  if (state_ == ContactState::kInContact && silence() > silent_after())
    state_ = ContactState::kSilent;
  if (state_ == ContactState::kSilent && lease_left() < Clock::Duration(0))
    state_ = ContactState::kFenced;
  return state_ != before;
}

}  // namespace cohort::agent
