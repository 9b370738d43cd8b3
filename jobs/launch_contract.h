// The environment variables cohort sets for every worker (DESIGN §4's launch
// contract). A job's [job.env] may not set them: RANK or CUDA_VISIBLE_DEVICES
// from a job file would silently break the rank plan, so the loader rejects
// them and the agent never lets them through.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::jobs {

const std::vector<std::string>& launch_contract_variables();
bool is_launch_contract_variable(std::string_view name);

}  // namespace cohort::jobs
