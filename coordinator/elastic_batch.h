// Elastic batch: what global batch an elastic training job's attempt keeps,
// and on how many nodes it can keep it.
//
// With `train.elastic_batch = "keep"` (the default) a job keeps one global
// batch at every world size: its `train.global_batch`, or, when that is 0,
// micro_batch × data-parallel degree at its MAX nodes (the batch it was
// written for). Gradient accumulation makes up the difference, so a job
// that shrinks from 2 nodes to 1 trains on 16 sequences a step with
// accumulation 2 instead of silently on 8. An attempt is placed on the most
// nodes it fits on whose micro_batch × data-parallel degree divides that
// batch; where no such count fits, placement fails with an error naming the
// fix. The attempt's launch orders carry the job file with the kept batch
// written in (cohort-worker reads only its file). `"scale"`: the global
// batch follows the world size, as without this module.
//
// Pure functions; jobs other than elastic train jobs pass through unchanged.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort::coordinator {

struct BatchPlan {
  int nodes = 0;             // nodes to place (≤ the fitting count asked about)
  int global_batch = 0;      // 0: not an elastic train job; nothing changed
  int accumulation = 0;
  std::string launch_toml;   // the job file the launch orders carry
  std::string note;          // for the job's events ("" when nothing to say)
};

// The plan for an attempt of the job in `job_toml` (a resolved job file)
// when `fitting_nodes` nodes could take it. kFailedPrecondition naming
// train.global_batch, the node counts tried and the fix when no node count
// from nodes MIN to `fitting_nodes` can keep the batch.
Result<BatchPlan> plan_elastic_batch(const std::string& job_toml, int fitting_nodes);

}  // namespace cohort::coordinator
