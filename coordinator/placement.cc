// Gang placement over the nodes' free GPUs.
#include "coordinator/placement.h"

#include <algorithm>

namespace cohort::coordinator {

std::optional<std::vector<NodeAssignment>> place(const PlacementRequest& request,
                                                 std::vector<NodeCapacity> capacity) {
  if (request.gpus_per_node < 1 || request.nodes_min < 1) return std::nullopt;
  std::sort(capacity.begin(), capacity.end(),
            [](const NodeCapacity& a, const NodeCapacity& b) { return a.name < b.name; });
  std::vector<NodeAssignment> chosen;
  for (auto& node : capacity) {
    if (int(chosen.size()) >= request.nodes_max) break;
    if (int(node.free_gpus.size()) < request.gpus_per_node) continue;
    std::sort(node.free_gpus.begin(), node.free_gpus.end());
    node.free_gpus.resize(request.gpus_per_node);
    chosen.push_back({node.name, node.free_gpus});
  }
  if (int(chosen.size()) < request.nodes_min) return std::nullopt;
  return chosen;
}

int count_fitting_nodes(const PlacementRequest& request, const std::vector<NodeCapacity>& capacity) {
  int n = 0;
  for (const auto& node : capacity) n += int(node.free_gpus.size()) >= request.gpus_per_node;
  return n;
}

}  // namespace cohort::coordinator
