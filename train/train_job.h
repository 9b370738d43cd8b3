// kind = "train": the built-in worker's training job. It joins the job's
// collective from the environment the agent (or mpirun/srun, or torchrun) set
// up, builds the sharded model, and runs the loop to completion, resuming from
// the latest checkpoint in output_dir. Errors come back as Status naming the
// file, rank or setting at fault; the caller turns them into the exit code.
#pragma once

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::train {

Status run_train(const jobs::JobSpec& spec);
// True once the worker was asked to stop by SIGTERM (preemption, cancel):
// run_train then checkpoints and returns an error saying so.
bool stop_requested_by_signal();

}  // namespace cohort::train
