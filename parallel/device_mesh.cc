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
  return mesh;
}

}  // namespace cohort::parallel
