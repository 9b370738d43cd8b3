// ConnectionSlots: who holds an HTTP server's connection slots, and which
// connection to close when a new one needs a slot (the slowloris defence of
// the dashboard and of the inference server).
//
// A connection is "waiting" from accept until its request has arrived
// (header and body); a server closes a waiting connection that sends no
// first byte within its first-byte timeout or no complete request within
// its request timeout. Slots are capped in total and per client address.
// When a new connection would pass a cap, the connection that has waited
// longest for its request gives up its slot: from the same address when
// that address is at its own cap, else from any address. A client that
// trickles bytes therefore holds a slot only until someone else needs it,
// and a request that arrives whole (a health check) always gets one.
// Connections whose request has arrived (being answered, or streaming) are
// never closed for room; when every slot holds one, the new connection is
// refused.
//
// Not thread-safe: the server's I/O thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cohort {

struct ConnectionLimits {
  size_t total = 64;
  size_t per_address = 16;
};

class ConnectionSlots {
 public:
  explicit ConnectionSlots(ConnectionLimits limits) : limits_(limits) {}

  struct Admission {
    bool admitted = false;
    std::optional<uint64_t> evict;  // close this waiting connection first
  };
  // A new connection `id` (unique, chosen by the caller) from `address`.
  // When admitted it holds a slot until release(id); `evict`, if set, has
  // been released already and must be closed by the caller.
  Admission admit(uint64_t id, const std::string& address);
  // Its request has arrived: it is never evicted from now on.
  void request_arrived(uint64_t id);
  void release(uint64_t id);

  size_t open() const { return slots_.size(); }
  size_t open_from(const std::string& address) const;
  const ConnectionLimits& limits() const { return limits_; }

 private:
  struct Slot {
    std::string address;
    uint64_t order = 0;  // admission order: smaller waited longer
    bool waiting = true;
  };
  // The waiting connection admitted first (of `address`, or of any when "").
  std::optional<uint64_t> oldest_waiting(const std::string& address) const;

  ConnectionLimits limits_;
  std::map<uint64_t, Slot> slots_;
  uint64_t next_order_ = 0;
};

}  // namespace cohort
