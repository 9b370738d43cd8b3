// The GPU tensor-parallel group of the decode engine (models/decode/), built
// here so that models/ never depends on collective/: NCCL over the ranks of
// a CPU tensor-parallel group, which carries its unique id.
#pragma once

#include "collective/communicator.h"
#include "models/tensor_parallel.h"

namespace cohort::worker {

// A factory the engine calls on its runtime thread (with `device` current).
// The NCCL communicator is blocking, so that every launch happens on the
// calling thread (stream capture records only the capturing thread's
// launches), named "<tp_cpu's name>/nccl", with tp_cpu's timeout. `tp_cpu`
// must outlive the group. Without NCCL in this build the factory fails.
models::EnqueuedTensorParallelFactory enqueued_tensor_parallel(collective::Communicator* tp_cpu,
                                                               int device);

}  // namespace cohort::worker
