// Sweeps: `cohort submit job.toml --sweep train.lr=1e-4,3e-4 --sweep
// train.seed=1..4` submits one job per point of the grid (the product of the
// axes, first axis slowest), as Slurm job arrays do for one axis. Each point
// is a list of overrides (`--set key=value`, applied after the command's own
// --set), and each job gets its own name (<name>-<i>) and output_dir
// (<output_dir>/sweep-<i>), so no two points write one folder.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "jobs/load.h"

namespace cohort::jobs {

inline constexpr size_t kMaxSweepPoints = 1000;

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;  // as typed; the loader checks each
};

// "KEY=V1,V2,..." or "KEY=LO..HI" (integers, both ends included).
// kInvalidArgument naming the argument for anything else.
Result<SweepAxis> parse_sweep(const std::string& arg);

// Every point of the grid, each as the overrides that make it.
// kInvalidArgument when it has more than kMaxSweepPoints points.
Result<std::vector<std::vector<Override>>> sweep_points(const std::vector<SweepAxis>& axes);

// The point's job: its own name and output folder (see above).
void apply_sweep_point(int index, JobSpec* spec);

}  // namespace cohort::jobs
