// The job file that `cohort run --nproc-per-node N -- PROGRAM ARGS...` stands
// for, as torchrun users launch: a command job of N workers per node running
// PROGRAM ARGS with the torchrun environment (DESIGN §4's launch contract),
// named after the script (train.py → "train") or else the program. Loading
// the text (load_job_text) then applies --set overrides, defaults and checks
// exactly as for a file.
#pragma once

#include <string>
#include <vector>

namespace cohort::jobs {

std::string command_line_job_toml(const std::vector<std::string>& argv, int nproc_per_node, int nnodes);

}  // namespace cohort::jobs
