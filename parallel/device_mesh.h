// DeviceMesh: the world communicator plus this rank's data-parallel and
// tensor-parallel sub-communicators, and under expert parallelism its
// expert group and that group's replicas.
//
// The tp group of rank r is the tp consecutive ranks around it; its dp group
// is every rank with the same tp coordinate. With ep > 1 the dp group splits
// into expert groups of ep consecutive dp ranks (each holding every expert
// once between them, ParallelDims::ep_rank), and the ranks with the same
// ep_rank in every expert group (the same experts) form its replica group.
// Every rank builds its groups (Communicator::split is collective over the
// members only).
// The mesh borrows the world communicator, which must outlive it.
#pragma once

#include <memory>

#include "collective/communicator.h"
#include "base/parallel_dims.h"

namespace cohort::parallel {

class DeviceMesh {
 public:
  static Result<std::unique_ptr<DeviceMesh>> create(collective::Communicator* world,
                                                    const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  int rank() const { return world_->rank(); }
  int dp_rank() const { return dims_.dp_rank(rank()); }
  int tp_rank() const { return dims_.tp_rank(rank()); }
  collective::Communicator& world() const { return *world_; }
  collective::Communicator& dp() const { return *dp_; }
  collective::Communicator& tp() const { return *tp_; }
  int ep_rank() const { return dims_.ep_rank(rank()); }
  // Only with dims().ep > 1.
  collective::Communicator& ep() const { return *ep_; }
  collective::Communicator& expert_replicas() const { return *expert_replicas_; }

 private:
  DeviceMesh() = default;
  ParallelDims dims_;
  collective::Communicator* world_ = nullptr;
  std::unique_ptr<collective::Communicator> dp_, tp_, ep_, expert_replicas_;
};

}  // namespace cohort::parallel
