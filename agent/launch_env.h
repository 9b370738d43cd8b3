// The launch contract (DESIGN §4): the environment every worker starts with.
//
// A PyTorch script written for torchrun must run under cohort unchanged, so
// the rank variables are torchrun's names and meanings; CUDA_VISIBLE_DEVICES
// follows the job's `devices` setting with nvidia-smi's (PCI bus) indices.
//
// Precedence, lowest first:
//   1. the agent's inherited environment (PATH, HOME, …), minus rank variables
//      of any launcher the agent itself runs under (TORCHELASTIC_*, Slurm's
//      SLURM_PROCID/LOCALID/NODEID, Open MPI's OMPI_COMM_WORLD_*, PMI_*), which
//      would contradict cohort's ranks in a worker that looks for them;
//   2. the node's network (below), over the inherited environment when the
//      user named it (`cohort agent --advertise-address/--interface`), else
//      only where the inherited environment does not set it;
//   3. the job's `env` table, which overrides anything inherited;
//   4. cohort's contract variables (is_reserved_worker_env_key), which nothing
//      overrides: a job that could set RANK or CUDA_VISIBLE_DEVICES could make
//      two ranks collide or two jobs share a GPU. Job loaders should reject
//      such keys with a clear error; build_worker_env enforces it regardless.
// Defaults that are only filled when neither the job nor the inherited
// environment sets them: OMP_NUM_THREADS and PYTHONUNBUFFERED (see launch_env.cc).
//
// The node's network: where this node's collectives listen, so that peers on
// other nodes can reach them. COHORT_GLOO_HOSTNAME is the node's address (the
// one MASTER_ADDR names when rank 0 runs here); with a known interface,
// GLOO_SOCKET_IFNAME=IF and NCCL_SOCKET_IFNAME==IF (NCCL's '=' means exactly
// IF, not every name starting with it), which torch's Gloo and NCCL read too.
// The agent passes no address when it is a loopback one: one host needs none.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::agent {

using EnvMap = std::map<std::string, std::string>;

// Everything one worker's environment depends on. Plain data; the agent fills
// it from a launch order and its own state.
struct LaunchContext {
  std::string job_id;
  std::string node;       // COHORT_NODE: the agent's node name
  int attempt = 0;        // COHORT_ATTEMPT
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT (failure restarts so far)
  int max_restarts = 0;   // TORCHELASTIC_MAX_RESTARTS
  std::string run_id;     // TORCHELASTIC_RUN_ID
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK
  int num_nodes = 1;  // GROUP_WORLD_SIZE
  std::string master_addr;
  int master_port = 0;
  std::string store_endpoint;  // COHORT_STORE
  std::string store_token;     // COHORT_STORE_TOKEN: the proxy refuses connections without it
  std::string progress_file;   // COHORT_PROGRESS_FILE; omitted when empty
  // nvidia-smi indices of this node's workers of the job, in local-rank order
  // (gpu_indices[local_rank] is this worker's GPU). Empty for CPU slots. The
  // agent assigns them ascending, so the list is also in PCI bus order.
  std::vector<int> gpu_indices;
  cohort::jobs::DeviceVisibility devices = cohort::jobs::DeviceVisibility::kOwn;
  EnvMap job_env;        // the job file's [job.env]
  EnvMap inherited_env;  // the agent's own environment (see current_environment)
  int cpu_count = 0;     // cores for OMP_NUM_THREADS; 0: the agent's CPU affinity
  std::string node_address;         // agent/node_address.h; "" (a loopback one): no network variables
  std::string node_interface;       // "": none known
  bool node_network_named = false;  // the user chose it: overrides inherited variables
};

// Checks what build_worker_env relies on (ranks in range, one GPU per local
// rank, a master address and port); the error names the field at fault. The
// agent calls it on each launch order, so a bad order fails the launch
// instead of the daemon.
cohort::Status validate_launch_context(const LaunchContext& context);

// The worker's complete environment. `context` must pass
// validate_launch_context (a CHECK otherwise). Pure function, thread-safe.
EnvMap build_worker_env(const LaunchContext& context);

// True for the variables cohort sets and a job's `env` cannot override.
bool is_reserved_worker_env_key(std::string_view key);
const std::vector<std::string>& reserved_worker_env_keys();

// This process's environment (environ) as a map.
EnvMap current_environment();

}  // namespace cohort::agent
