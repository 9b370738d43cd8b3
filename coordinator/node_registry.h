// NodeRegistry: the nodes the coordinator knows, from registrations and
// heartbeats.
//
// Node states and their transitions:
//   (none) --register--> kAlive --silent for heartbeat_timeout--> kLost
//   kAlive --`cohort drain`, or its agent says it is leaving--> kDraining
//   kDraining --`cohort undrain` (and not leaving)--> kAlive
//   kDraining --its agent says it has stopped its workers--> kLeft
//   kAlive | kDraining --silent, or an order cannot be delivered--> kLost
//   kLost | kLeft --register--> kAlive, or kDraining while drained
// A drained ("cordoned") node takes no new work until `cohort undrain`,
// whatever its agent does meanwhile; that mark, and the reason the
// coordinator gave when it drained the node itself, survive agent and
// coordinator restarts. A lost or left node's heartbeats are refused
// (`heartbeat` returns false) so that its agent registers again and
// reconciles its workers.
//
// Not thread-safe: the coordinator's io_context thread owns it. Time comes
// from the injected clock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

enum class NodeState {
  kAlive,     // registered, heartbeats arriving, takes new work
  kDraining,  // heartbeats arriving, takes no new work; running work finishes or is stopped
  kLeft,      // its agent stopped its workers and left on purpose: not a failure
  kLost,      // no heartbeat for heartbeat_timeout; its workers count as failed
};
const char* to_string(NodeState state);
// Alive or draining: its agent's connection speaks for it and orders reach it.
bool is_connected(NodeState state);

struct Node {
  std::string name;
  std::string address;
  std::string peer;  // ZeroMQ routing id of its agent's current connection
  std::vector<protocol::GpuDesc> gpus;
  NodeState state = NodeState::kAlive;
  bool drained = false;  // `cohort drain`: no new work until `cohort undrain`
  std::string drain_reason;  // set when the coordinator drained it (an unhealthy GPU); kept in the state database
  bool leaving = false;  // its agent is stopping its workers to exit
  Clock::TimePoint last_heartbeat{};
};

class NodeRegistry {
 public:
  NodeRegistry(const Clock& clock, Clock::Duration heartbeat_timeout)
      : clock_(clock), heartbeat_timeout_(heartbeat_timeout) {}

  // Adds or refreshes a node; it is alive from now on.
  void register_node(const protocol::RegisterNode& message, const std::string& peer);
  // A node known only from durable state: lost (or left, if it had) until
  // its agent registers.
  void restore_node(const std::string& name, const std::string& address, std::vector<protocol::GpuDesc> gpus,
                    bool drained, const std::string& drain_reason, bool left);
  // False when the node is unknown, lost or left: its agent must register again.
  bool heartbeat(const std::string& name, const std::string& peer);
  // `cohort drain` / `cohort undrain`; false for an unknown node.
  bool set_drained(const std::string& name, bool drained);
  // Drains it and says why (an unhealthy GPU); `cohort undrain` clears both.
  bool drain_for(const std::string& name, const std::string& reason);
  // Its agent is leaving (kDraining), then has left (kLeft).
  void mark_leaving(const std::string& name);
  void mark_left(const std::string& name);
  // A node whose agent cannot be reached (its connection is gone): lost now.
  void mark_lost(const std::string& name);
  // Forgets a node (`cohort nodes rm`).
  void remove(const std::string& name) { nodes_.erase(name); }
  // Marks alive and draining nodes silent for longer than the timeout as
  // lost and returns their names.
  std::vector<std::string> expire();

  const Node* find(const std::string& name) const;
  // Every node, sorted by name (the stable order node ranks follow).
  std::vector<const Node*> nodes() const;
  Clock::Duration heartbeat_timeout() const { return heartbeat_timeout_; }

 private:
  const Clock& clock_;
  Clock::Duration heartbeat_timeout_;
  std::map<std::string, Node> nodes_;
};

}  // namespace cohort::coordinator
