// ConnectionSlots: caps per server and per address, eviction of the longest waiting.
#include "base/connection_slots.h"

namespace cohort {

size_t ConnectionSlots::open_from(const std::string& address) const {
  size_t n = 0;
  for (const auto& [id, slot] : slots_) n += slot.address == address;
  return n;
}

std::optional<uint64_t> ConnectionSlots::oldest_waiting(const std::string& address) const {
  std::optional<uint64_t> best;
  uint64_t best_order = 0;
  for (const auto& [id, slot] : slots_) {
    if (!slot.waiting || (!address.empty() && slot.address != address)) continue;
    if (!best || slot.order < best_order) {
      best = id;
      best_order = slot.order;
    }
  }
  return best;
}

ConnectionSlots::Admission ConnectionSlots::admit(uint64_t id, const std::string& address) {
  Admission a;
  if (open_from(address) >= limits_.per_address) {
    a.evict = oldest_waiting(address);
    if (!a.evict) return a;  // all of this address's slots are being answered
  } else if (slots_.size() >= limits_.total) {
    a.evict = oldest_waiting("");
    if (!a.evict) return a;
  }
  if (a.evict) slots_.erase(*a.evict);
  slots_[id] = Slot{address, next_order_++, true};
  a.admitted = true;
  return a;
}

void ConnectionSlots::request_arrived(uint64_t id) {
  auto it = slots_.find(id);
  if (it != slots_.end()) it->second.waiting = false;
}

void ConnectionSlots::release(uint64_t id) {
  slots_.erase(id);
}

}  // namespace cohort
