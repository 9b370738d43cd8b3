// The rank plan: which global rank, data-parallel and tensor-parallel
// coordinates each worker gets. RANK = node_rank * gpus_per_node + local_rank;
// tensor-parallel groups are consecutive ranks, so they stay inside a node.
// assign_rank is the one place that formula lives: the coordinator (which
// node runs which rank), the agent (RANK of the workers it launches) and
// `cohort validate` (plan_ranks) all call it.
#pragma once

#include <string>
#include <vector>

namespace cohort::jobs {

struct RankAssignment {
  int rank = 0;
  int node_rank = 0;
  int local_rank = 0;
  int dp_rank = 0;  // coordinate on the data-parallel axis
  int tp_rank = 0;  // coordinate on the tensor-parallel axis
};

// The worker at `local_rank` on the node at `node_rank`. tensor_parallel
// (default 1) only sets the dp/tp coordinates.
RankAssignment assign_rank(int node_rank, int local_rank, int gpus_per_node,
                           int tensor_parallel = 1);

// Every rank in order. Requires nodes ≥ 1, gpus_per_node ≥ 1 and tensor_parallel dividing the world
// size (load_job_file checks all three).
std::vector<RankAssignment> plan_ranks(int nodes, int gpus_per_node, int tensor_parallel);

// A table, one row per rank, as `cohort validate` prints it.
std::string format_rank_plan(const std::vector<RankAssignment>& plan, int tensor_parallel);

}  // namespace cohort::jobs
