// kind = "serve": the OpenAI-compatible server (serve_http.h) over the model
// split tensor-parallel across every rank of the job. Rank 0 serves HTTP and
// runs the scheduler; each step it broadcasts what changed (requests that
// arrived, cancellations, whether to stop) over the CPU communicator, and
// every rank applies the same changes to its own Scheduler before the same
// step, so all make the same engine calls (scheduler.h, determinism). Runs
// until SIGTERM, then drains: running and queued requests finish, new ones
// get 503, and the job exits 0 when none is left.
#pragma once

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::infer {

Status run_serve(const jobs::JobSpec& spec);

}  // namespace cohort::infer
