// The built-in worker's entry points (`cohort-worker JOB.toml`): one function
// per job kind, each joining the job's collective from the environment the
// agent (or mpirun/srun, or torchrun) set up, and running to completion.
// Errors come back as Status naming the file, rank or setting at fault; the
// caller turns them into the process exit code.
#pragma once

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::runners {

// kind = "train": jobs/runners/train_runner.cc.
Status run_train(const jobs::JobSpec& spec);
// True once the worker was asked to stop by SIGTERM (preemption, cancel):
// run_train then checkpoints and returns an error saying so.
bool stop_requested_by_signal();
// kind = "infer": jobs/runners/infer_runner.cc.
Status run_infer(const jobs::JobSpec& spec);

}  // namespace cohort::runners
