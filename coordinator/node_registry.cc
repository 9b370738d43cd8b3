// NodeRegistry: registration, heartbeats and loss detection.
#include "coordinator/node_registry.h"

namespace cohort::coordinator {

const char* to_string(NodeState state) {
  switch (state) {
    case NodeState::kAlive: return "alive";
    case NodeState::kDraining: return "draining";
    case NodeState::kLeft: return "left";
    case NodeState::kLost: return "lost";
  }
  return "unknown";
}

bool is_connected(NodeState state) { return state == NodeState::kAlive || state == NodeState::kDraining; }

void NodeRegistry::register_node(const protocol::RegisterNode& message, const std::string& peer) {
  Node& node = nodes_[message.node];
  node.name = message.node;
  node.address = message.address;
  node.peer = peer;
  node.gpus = message.gpus;
  node.leaving = false;
  node.state = node.drained ? NodeState::kDraining : NodeState::kAlive;
  node.last_heartbeat = clock_.now();
}

void NodeRegistry::restore_node(const std::string& name, const std::string& address,
                                std::vector<protocol::GpuDesc> gpus, bool drained,
                                const std::string& drain_reason, bool left) {
  Node& node = nodes_[name];
  node.name = name;
  node.address = address;
  node.gpus = std::move(gpus);
  node.drained = drained;
  node.drain_reason = drained ? drain_reason : "";
  node.state = left ? NodeState::kLeft : NodeState::kLost;
  node.last_heartbeat = clock_.now();
}

bool NodeRegistry::set_drained(const std::string& name, bool drained) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return false;
  Node& node = it->second;
  node.drained = drained;
  if (!drained) node.drain_reason.clear();
  if (drained && node.state == NodeState::kAlive) node.state = NodeState::kDraining;
  if (!drained && node.state == NodeState::kDraining && !node.leaving) node.state = NodeState::kAlive;
  return true;
}

bool NodeRegistry::drain_for(const std::string& name, const std::string& reason) {
  if (!set_drained(name, true)) return false;
  nodes_.at(name).drain_reason = reason;
  return true;
}

void NodeRegistry::mark_leaving(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || !is_connected(it->second.state)) return;
  it->second.leaving = true;
  it->second.state = NodeState::kDraining;
}

void NodeRegistry::mark_left(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  it->second.leaving = false;
  it->second.state = NodeState::kLeft;
}

bool NodeRegistry::heartbeat(const std::string& name, const std::string& peer) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || !is_connected(it->second.state)) return false;
  it->second.peer = peer;
  it->second.last_heartbeat = clock_.now();
  return true;
}

void NodeRegistry::mark_lost(const std::string& name) {
  auto it = nodes_.find(name);
  if (it != nodes_.end()) it->second.state = NodeState::kLost;
}

std::vector<std::string> NodeRegistry::expire() {
  std::vector<std::string> lost;
  auto now = clock_.now();
  for (auto& [name, node] : nodes_) {
    if (is_connected(node.state) && now - node.last_heartbeat > heartbeat_timeout_) {
      node.state = NodeState::kLost;
      lost.push_back(name);
    }
  }
  return lost;
}

const Node* NodeRegistry::find(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<const Node*> NodeRegistry::nodes() const {
  std::vector<const Node*> out;
  for (const auto& [name, node] : nodes_) out.push_back(&node);
  return out;
}

}  // namespace cohort::coordinator
