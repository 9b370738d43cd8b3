// build_worker_env: the launch contract, in one place (see launch_env.h).
#include "agent/launch_env.h"

#include "jobs/launch_contract.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"

extern char** environ;

namespace cohort::agent {
namespace {

// Rank-bearing variables of launchers the agent itself may run under.
bool is_foreign_rank_key(std::string_view key) {
  static const char* const kExact[] = {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                                       "PMI_RANK",     "PMI_SIZE",      "PMIX_RANK"};
  for (const char* exact : kExact) {
    if (key == exact) return true;
  }
  return key.starts_with("TORCHELASTIC_") || key.starts_with("OMPI_COMM_WORLD_");
}

int usable_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string join_indices(const std::vector<int>& indices) {
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(indices[i]);
  }
  return out;
}

EnvMap node_network_env(const LaunchContext& c) {
  EnvMap out;
  if (c.node_address.empty()) return out;
  out["COHORT_GLOO_HOSTNAME"] = c.node_address;
  if (!c.node_interface.empty()) {
    out["GLOO_SOCKET_IFNAME"] = c.node_interface;
    out["NCCL_SOCKET_IFNAME"] = "=" + c.node_interface;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& reserved_worker_env_keys() {
  return cohort::jobs::launch_contract_variables();
}

bool is_reserved_worker_env_key(std::string_view key) {
  const auto& keys = reserved_worker_env_keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

cohort::Status validate_launch_context(const LaunchContext& c) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(fmt::format("launch of job {} rank {}: {}", c.job_id, c.rank, why));
  };
  if (c.job_id.empty()) return bad("job_id is empty");
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return bad(fmt::format("rank {} is outside world_size {}", c.rank, c.world_size));
  }
  if (c.local_world_size < 1 || c.local_rank < 0 || c.local_rank >= c.local_world_size) {
    return bad(fmt::format("local_rank {} is outside local_world_size {}", c.local_rank,
                           c.local_world_size));
  }
  if (c.num_nodes < 1 || c.node_rank < 0 || c.node_rank >= c.num_nodes) {
    return bad(fmt::format("node_rank {} is outside num_nodes {}", c.node_rank, c.num_nodes));
  }
  if (!c.gpu_indices.empty() && static_cast<int>(c.gpu_indices.size()) != c.local_world_size) {
    return bad(
        fmt::format("{} GPU indices for local_world_size {} (one per local rank, or none "
                    "for CPU slots)",
                    c.gpu_indices.size(), c.local_world_size));
  }
  if (std::any_of(c.gpu_indices.begin(), c.gpu_indices.end(), [](int i) { return i < 0; })) {
    return bad("a GPU index is negative");
  }
  if (c.master_addr.empty()) return bad("master_addr is empty");
  if (c.master_port < 1 || c.master_port > 65535) {
    return bad(fmt::format("master_port {} is not a TCP port", c.master_port));
  }
  if (c.attempt < 0 || c.restart_count < 0 || c.max_restarts < 0) {
    return bad("attempt, restart_count and max_restarts must not be negative");
  }
  return cohort::Status::ok();
}

EnvMap build_worker_env(const LaunchContext& c) {
  cohort::Status valid = validate_launch_context(c);
  COHORT_CHECK_MSG(valid.is_ok(), "{}", valid.message());

  EnvMap env;
  for (const auto& [key, value] : c.inherited_env) {
    if (!is_foreign_rank_key(key)) env[key] = value;
  }
  for (const auto& [key, value] : node_network_env(c)) {
    if (c.node_network_named || !env.contains(key)) env.insert_or_assign(key, value);
  }
  for (const auto& [key, value] : c.job_env) env[key] = value;

  // Defaults, only where neither the job nor the agent's environment chose.
  // OMP_NUM_THREADS: torchrun uses 1, which starves CPU-slot workers (Gloo
  // training on CPU) on many-core hosts. The cores shared out evenly
  // (cores / local_world_size) avoids oversubscription just as well while
  // leaving each worker its share for CPU-side work.
  if (!env.contains("OMP_NUM_THREADS")) {
    int cores = c.cpu_count > 0 ? c.cpu_count : usable_cpu_count();
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, cores / c.local_world_size));
  }
  // Python block-buffers stdout into a pipe: logs would arrive only at exit
  // and the last lines of a killed worker, the ones a root-cause report
  // needs, would be lost.
  if (!env.contains("PYTHONUNBUFFERED")) env.insert_or_assign("PYTHONUNBUFFERED", std::string("1"));

  // insert_or_assign with a std::string also sidesteps a GCC 12 -Wrestrict
  // false positive on assigning string literals through operator[].
  auto set = [&env](const char* key, std::string value) {
    env.insert_or_assign(key, std::move(value));
  };
  set("RANK", std::to_string(c.rank));
  set("WORLD_SIZE", std::to_string(c.world_size));
  set("LOCAL_RANK", std::to_string(c.local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(c.local_world_size));
  set("GROUP_RANK", std::to_string(c.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(c.num_nodes));
  set("ROLE_RANK", std::to_string(c.rank));  // one role per job: role ranks are ranks
  set("ROLE_WORLD_SIZE", std::to_string(c.world_size));
  set("ROLE_NAME", "default");  // torchrun's name for the only role
  set("MASTER_ADDR", c.master_addr);
  set("MASTER_PORT", std::to_string(c.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(c.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(c.max_restarts));
  set("TORCHELASTIC_RUN_ID", c.run_id);
  set("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  if (c.gpu_indices.empty()) {
    set("CUDA_VISIBLE_DEVICES", "");  // CPU slot: never pick up a GPU by accident
  } else if (c.devices == cohort::jobs::DeviceVisibility::kOwn) {
    set("CUDA_VISIBLE_DEVICES", std::to_string(c.gpu_indices[c.local_rank]));
  } else {
    // Local-rank order, so that cuda:LOCAL_RANK is this worker's own GPU.
    set("CUDA_VISIBLE_DEVICES", join_indices(c.gpu_indices));
  }
  set("COHORT_JOB_ID", c.job_id);
  set("COHORT_ATTEMPT", std::to_string(c.attempt));
  set("COHORT_NODE", c.node);
  set("COHORT_STORE", c.store_endpoint);
  if (c.store_token.empty()) {
    env.erase("COHORT_STORE_TOKEN");
  } else {
    set("COHORT_STORE_TOKEN", c.store_token);
  }
  if (c.progress_file.empty()) {
    env.erase("COHORT_PROGRESS_FILE");
  } else {
    set("COHORT_PROGRESS_FILE", c.progress_file);
  }
  return env;
}

EnvMap current_environment() {
  EnvMap env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

}  // namespace cohort::agent
