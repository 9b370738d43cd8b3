#include "jobs/launch_contract.h"

#include <algorithm>

namespace cohort::jobs {

const std::vector<std::string>& launch_contract_variables() {
  static const std::vector<std::string> names = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
      "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
      "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "COHORT_JOB_ID", "COHORT_ATTEMPT", "COHORT_NODE", "COHORT_STORE",
      "COHORT_STORE_TOKEN", "COHORT_PROGRESS_FILE"};
  return names;
}

bool is_launch_contract_variable(std::string_view name) {
  const auto& names = launch_contract_variables();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace cohort::jobs
