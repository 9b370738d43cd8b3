// ParallelDims: how a job's world splits into data-parallel × tensor-parallel,
// the one place that arithmetic lives (the job file's checks and rank plan,
// the device mesh, the training and inference jobs).
//
// dp × tp must equal the world size exactly, and tensor-parallel groups are
// consecutive ranks (so they stay inside a node); anything else is an error
// that names the numbers, never a silent downgrade.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort {

struct ParallelDims {
  int world = 1;
  int dp = 1;  // data-parallel degree (the "dp" mesh axis)
  int tp = 1;  // tensor-parallel degree (the "tp" mesh axis)
  // Expert parallelism: a mixture of experts' experts split over ep
  // consecutive data-parallel ranks (an "expert group"); the dp/ep groups
  // holding the same experts are each other's replicas.
  int ep = 1;

  // Checks dp × tp == world, that ep divides dp, and every degree ≥ 1.
  static Result<ParallelDims> create(int world, int tp, int ep = 1);

  // Mesh coordinates of a global rank: consecutive ranks share a tp group.
  int dp_rank(int rank) const { return rank / tp; }
  int tp_rank(int rank) const { return rank % tp; }
  int ep_rank(int rank) const { return dp_rank(rank) % ep; }
  // Which copy of the experts the rank's expert group holds.
  int expert_replica(int rank) const { return dp_rank(rank) / ep; }
  std::string to_string() const;
};

}  // namespace cohort
