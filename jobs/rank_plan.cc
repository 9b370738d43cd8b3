#include "jobs/rank_plan.h"

#include <fmt/format.h>

#include "base/parallel_dims.h"

namespace cohort::jobs {

RankAssignment assign_rank(int node_rank, int local_rank, int gpus_per_node, int tensor_parallel) {
  const int rank = node_rank * gpus_per_node + local_rank;
  // The mesh coordinates the workers' DeviceMesh gives the same rank.
  ParallelDims dims;
  dims.tp = tensor_parallel;
  return RankAssignment{rank, node_rank, local_rank, dims.dp_rank(rank), dims.tp_rank(rank)};
}

std::vector<RankAssignment> plan_ranks(int nodes, int gpus_per_node, int tensor_parallel) {
  std::vector<RankAssignment> plan;
  plan.reserve(size_t(nodes) * size_t(gpus_per_node));
  for (int node = 0; node < nodes; ++node) {
    for (int local = 0; local < gpus_per_node; ++local) {
      plan.push_back(assign_rank(node, local, gpus_per_node, tensor_parallel));
    }
  }
  return plan;
}

std::string format_rank_plan(const std::vector<RankAssignment>& plan, int tensor_parallel) {
  const auto dims = ParallelDims::create(int(plan.size()), tensor_parallel);
  const int dp = dims.is_ok() ? dims->dp : 0;
  std::string out = fmt::format("rank plan: {} ranks = data-parallel {} × tensor-parallel {}\n",
                                plan.size(), dp, tensor_parallel);
  out += fmt::format("{:>6} {:>10} {:>11} {:>8} {:>8}\n", "rank", "node_rank", "local_rank", "dp_rank",
                     "tp_rank");
  for (const auto& r : plan)
    out += fmt::format("{:>6} {:>10} {:>11} {:>8} {:>8}\n", r.rank, r.node_rank, r.local_rank,
                       r.dp_rank, r.tp_rank);
  return out;
}

}  // namespace cohort::jobs
