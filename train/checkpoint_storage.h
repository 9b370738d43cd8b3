// Where a training run's checkpoints live (train.checkpoint_storage), checked
// when every attempt starts.
//
// Shared (the default): every rank writes its shards under output_dir and any
// rank may read any shard back (a resume on other nodes or another world
// size), so output_dir must be one filesystem all nodes see at the same path.
// Rather than fail late, at the first resume on another node set, each
// attempt proves it: rank 0 writes a marker with a fresh name there, and
// every rank must read it. Node-local: each node keeps its own ranks' shards
// (parallel/checkpoint.h, CheckpointStorage), so a resume needs the very
// nodes that wrote them, with the same ranks on each; anything else is
// refused with both node lists.
//
// All three calls are collective over the world (every rank calls them, in
// this order) and return the same verdict on every rank.
#pragma once

#include <string>

#include "base/status.h"
#include "collective/bootstrap.h"
#include "jobs/spec.h"
#include "parallel/checkpoint.h"

namespace cohort::train {

// This rank's storage: node-local or not, its node (COHORT_NODE, else the
// host name), its rank on the node, and every rank's node.
Result<parallel::CheckpointStorage> describe_storage(const jobs::JobSpec& spec, const collective::World& world);

// Shared storage: every rank sees rank 0's marker in output_dir, else
// kFailedPrecondition naming the ranks and nodes that do not, the path, and
// what to do.
Status check_shared_output_dir(const std::string& output_dir, const parallel::CheckpointStorage& storage,
                               collective::Communicator& world);

// The checkpoint this rank resumes from ("" to start afresh). Node-local:
// every node must hold the same latest step, saved by the ranks of the
// same nodes as now; kFailedPrecondition otherwise.
Result<std::string> resume_checkpoint(const std::string& output_dir, const parallel::CheckpointStorage& storage,
                                      collective::Communicator& world);

}  // namespace cohort::train
