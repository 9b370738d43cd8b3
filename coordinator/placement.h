// Gang placement: which nodes, and which GPUs on them, a job's attempt gets.
//
// A job is placed only when all of its nodes fit at once: at least
// `nodes_min` nodes with `gpus_per_node` free GPUs each (an elastic job takes
// up to `nodes_max`). Nodes are taken in a stable order (by name), and node
// rank follows that order, so RANK = node_rank * gpus_per_node + local_rank
// names the same worker on every attempt over the same nodes. On each node
// the lowest free GPU indices are taken, in ascending (PCI bus) order.
//
// Pure functions, no state.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::coordinator {

struct NodeCapacity {
  std::string name;
  std::vector<int> free_gpus;  // nvidia-smi indices not used by any job
};

struct PlacementRequest {
  int nodes_min = 1;
  int nodes_max = 1;
  int gpus_per_node = 1;
};

struct NodeAssignment {
  std::string node;
  std::vector<int> gpu_indices;  // local-rank order
};

// The placement in node-rank order, or nullopt when fewer than nodes_min
// nodes fit. `capacity` may come in any order.
std::optional<std::vector<NodeAssignment>> place(const PlacementRequest& request,
                                                 std::vector<NodeCapacity> capacity);

// How many nodes could take the job right now (for "waiting: 1 of 2 nodes fit").
int count_fitting_nodes(const PlacementRequest& request, const std::vector<NodeCapacity>& capacity);

}  // namespace cohort::coordinator
