// init_from_environment: the one call a worker makes to join its job.
//
// It reads how the process was launched and returns the world's CPU
// communicator; GPU code then builds its NCCL communicator on top of it
// (nccl/nccl_communicator.h: NcclCommunicator::create(world.cpu, ...)), which
// uses the CPU communicator to broadcast NCCL's unique id.
//
// Ways in, first match wins:
//  1. cohort's launch: COHORT_STORE=tcp://host:port (the agent's store proxy)
//     with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE. Gloo.
//  2. torchrun-style: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE. Rank 0
//     serves a TcpStoreServer on MASTER_PORT itself (as torch's TCPStore
//     does) on all addresses; every rank, 0 included, connects to
//     MASTER_ADDR:MASTER_PORT. Gloo.
//  3. mpirun, or srun with MPI's process management (OMPI_COMM_WORLD_*,
//     PMI_*, PMIX_*): ranks from MPI. MPI.
//  4. srun without MPI (SLURM_PROCID, SLURM_NTASKS of a step, no RANK):
//     ranks from Slurm's variables, then as 2 with MASTER_ADDR/MASTER_PORT
//     taken from the step (collective/slurm_launch.h). Gloo.
//  5. nothing: a world of one (in-memory store, Gloo).
// WorldOptions::backend = kMpi forces MPI; kGloo refuses an MPI launch that
// has no store.
//
// Gloo's listening address: GLOO_SOCKET_IFNAME (an interface) wins, then
// COHORT_GLOO_HOSTNAME, then 127.0.0.1 when the store is on loopback, else
// this host's name.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/store/store.h"
#include "collective/store/tcp_store.h"

namespace cohort::collective {

enum class CpuBackend { kAuto, kGloo, kMpi };
enum class Launch { kSingle, kCohort, kTorchrun, kMpi, kSlurm };

const char* launch_name(Launch launch);

struct WorldOptions {
  CpuBackend backend = CpuBackend::kAuto;
  // Default timeout of every operation on the world and its splits.
  // COHORT_COLLECTIVE_TIMEOUT_S overrides it.
  Milliseconds timeout{std::chrono::minutes(10)};
};

struct World {
  Launch launch = Launch::kSingle;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // The job's store under the "collective" namespace (null under MPI).
  std::shared_ptr<store::Store> store;
  // The store rank 0 serves in a torchrun-style launch; keep World alive
  // for the whole job.
  std::unique_ptr<store::TcpStoreServer> server;
  std::shared_ptr<Communicator> cpu;
};

// Errors name the missing or malformed variable and what to set.
Result<World> init_from_environment(const WorldOptions& options = {});

}  // namespace cohort::collective
