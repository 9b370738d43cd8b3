// NodeRegistry: registration, heartbeats and loss detection.
#include "coordinator/node_registry.h"

namespace cohort::coordinator {

const char* to_string(NodeState state) {
  switch (state) {
    case NodeState::kAlive: return "alive";
    case NodeState::kLost: return "lost";
  }
  return "unknown";
}

void NodeRegistry::register_node(const protocol::RegisterNode& message, const std::string& peer) {
  Node& node = nodes_[message.node];
  node.name = message.node;
  node.address = message.address;
  node.peer = peer;
  node.gpus = message.gpus;
  node.state = NodeState::kAlive;
  node.last_heartbeat = clock_.now();
}

void NodeRegistry::restore_node(const std::string& name, const std::string& address,
                                std::vector<protocol::GpuDesc> gpus) {
  Node& node = nodes_[name];
  node.name = name;
  node.address = address;
  node.gpus = std::move(gpus);
  node.state = NodeState::kLost;
  node.last_heartbeat = clock_.now();
}

bool NodeRegistry::heartbeat(const std::string& name, const std::string& peer) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.state != NodeState::kAlive) return false;
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
    if (node.state == NodeState::kAlive && now - node.last_heartbeat > heartbeat_timeout_) {
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
