#include "parallel/device_mesh.h"

#include <fmt/format.h>

namespace cohort::parallel {

Result<std::unique_ptr<DeviceMesh>> DeviceMesh::create(collective::Communicator* world,
                                                       const ParallelDims& dims) {
  if (world->size() != dims.world)
    return invalid_argument(fmt::format("the mesh wants {} ranks ({}) but the communicator has {}",
                                        dims.world, dims.to_string(), world->size()));
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh());
  mesh->dims_ = dims;
  mesh->world_ = world;
  int rank = world->rank();
  std::vector<int> tp_ranks, dp_ranks;
  for (int j = 0; j < dims.tp; ++j) tp_ranks.push_back(dims.dp_rank(rank) * dims.tp + j);
  for (int k = 0; k < dims.dp; ++k) dp_ranks.push_back(k * dims.tp + dims.tp_rank(rank));
  // The order of the two splits is the same on every rank, as collectives require.
  collective::SplitOptions tp_options{fmt::format("tp{}", dims.dp_rank(rank)), {}};
  COHORT_ASSIGN_OR_RETURN(mesh->tp_, world->split(tp_ranks, tp_options));
  collective::SplitOptions dp_options{fmt::format("dp{}", dims.tp_rank(rank)), {}};
  COHORT_ASSIGN_OR_RETURN(mesh->dp_, world->split(dp_ranks, dp_options));
  if (dims.ep > 1) {
    // Sub-groups of the dp group (whose ranks are dp_ranks, by dp rank).
    const int dp_rank = dims.dp_rank(rank), group = dp_rank / dims.ep;
    std::vector<int> ep_ranks, replica_ranks;
    for (int e = 0; e < dims.ep; ++e) ep_ranks.push_back(dp_ranks[group * dims.ep + e]);
    for (int g = 0; g < dims.dp / dims.ep; ++g) replica_ranks.push_back(dp_ranks[g * dims.ep + dp_rank % dims.ep]);
    collective::SplitOptions ep_options{fmt::format("ep{}.{}", dims.tp_rank(rank), group), {}};
    COHORT_ASSIGN_OR_RETURN(mesh->ep_, world->split(ep_ranks, ep_options));
    collective::SplitOptions replica_options{fmt::format("experts{}.{}", dims.tp_rank(rank), dp_rank % dims.ep), {}};
    COHORT_ASSIGN_OR_RETURN(mesh->expert_replicas_, world->split(replica_ranks, replica_options));
  }
  return mesh;
}

}  // namespace cohort::parallel
