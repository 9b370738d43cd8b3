// A task of an `srun` step that MPI does not know about (srun --mpi=none, the
// default of many clusters, or a program that never calls MPI): its ranks
// come from Slurm's own variables, and the job joins torchrun-style, rank 0
// serving the store on MASTER_PORT at MASTER_ADDR.
//
//   RANK              SLURM_PROCID
//   WORLD_SIZE        SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
//   LOCAL_RANK        SLURM_LOCALID
//   LOCAL_WORLD_SIZE  this node's entry of SLURM_STEP_TASKS_PER_NODE (else
//                     SLURM_TASKS_PER_NODE), a compressed list: "4(x2),3"
//   node rank         SLURM_NODEID
//   MASTER_ADDR       MASTER_ADDR if set, else the first host of
//                     SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), where
//                     srun places task 0, else SLURM_LAUNCH_NODE_IPADDR
//   MASTER_PORT       MASTER_PORT if set, else 20000 + (job id × 16 + step
//                     id) mod 9500: below the MASTER_PORTs a cohort
//                     coordinator hands out (29500-31499) and Linux's
//                     ephemeral range, distinct for the steps of a job and for
//                     most concurrent jobs
//
// The launch node's address is the last resort, not the first: srun may run
// on a login node outside the step, where rank 0 is not.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace cohort::collective {

// Reads one environment variable: nullptr when unset or empty. Tests pass a
// map; workers the process environment.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup process_environment();

struct SlurmTask {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
};

// True inside a task of an srun step (SLURM_PROCID, SLURM_STEP_ID and
// SLURM_NTASKS set); a batch script alone has no step.
bool in_slurm_step(const EnvLookup& env);

// The task's ranks and master. Errors name the variable that is missing or
// malformed.
Result<SlurmTask> read_slurm_task(const EnvLookup& env);

// The first host of a Slurm host list: "gpu[03-05,9],login1" → "gpu03",
// "rack[1-2]-n[01-04]" → "rack1-n01", "a,b" → "a".
Result<std::string> first_slurm_host(const std::string& nodelist);

// The MASTER_PORT a step gets when none is set (the formula above).
int slurm_default_master_port(unsigned long long job_id, unsigned long long step_id);

// Node `node`'s task count in a compressed tasks-per-node list such as
// "4(x2),3" (nodes 0 and 1 have 4 tasks, node 2 has 3).
Result<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace cohort::collective
