// init_from_environment: environment variables in, a world communicator out.
#include "collective/bootstrap.h"

#include <unistd.h>

#include <cstdlib>

#include "base/env_knobs.h"
#include "base/host_address.h"
#include "collective/gloo/gloo_communicator.h"
#include "collective/mpi/mpi_communicator.h"
#include "collective/slurm_launch.h"

namespace cohort::collective {

namespace {

const char* env(const char* name) { return process_environment()(name); }

// A non-negative integer from variable `name`'s value `v`.
Result<int> parse_int(const char* name, const char* v) {
  try {
    size_t used = 0;
    int x = std::stoi(v, &used);
    if (used == std::string(v).size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  return invalid_argument(std::string(name) + "='" + v + "' is not a non-negative integer");
}

Result<int> env_int(const char* name, int fallback, bool required) {
  const char* v = env(name);
  if (v == nullptr) {
    if (required)
      return invalid_argument(std::string(name) + " is not set; the launcher must set it");
    return fallback;
  }
  return parse_int(name, v);
}

GlooOptions gloo_options(const std::string& store_host, Milliseconds timeout) {
  GlooOptions o;
  o.timeout = timeout;
  if (const char* iface = env("GLOO_SOCKET_IFNAME")) {
    o.iface = iface;
  } else if (const char* host = read_env_knob(EnvKnob::kGlooHostname)) {
    o.hostname = host;
  } else if (is_loopback_host(store_host)) {
    o.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    o.hostname = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "127.0.0.1";
  }
  return o;
}

Status read_ranks(World* world) {
  COHORT_ASSIGN_OR_RETURN(world->rank, env_int("RANK", 0, true));
  COHORT_ASSIGN_OR_RETURN(world->size, env_int("WORLD_SIZE", 1, true));
  COHORT_ASSIGN_OR_RETURN(world->local_rank, env_int("LOCAL_RANK", world->rank, false));
  COHORT_ASSIGN_OR_RETURN(world->local_size, env_int("LOCAL_WORLD_SIZE", world->size, false));
  if (world->size < 1 || world->rank >= world->size) {
    return invalid_argument("RANK=" + std::to_string(world->rank) +
                            " is not below WORLD_SIZE=" + std::to_string(world->size));
  }
  return Status::ok();
}

Status connect_gloo(World* world, const std::string& store_host, Milliseconds timeout) {
  COHORT_ASSIGN_OR_RETURN(auto comm,
                          GlooCommunicator::create(world->store, world->rank, world->size,
                                                   gloo_options(store_host, timeout)));
  world->cpu = std::move(comm);
  return Status::ok();
}

Status join_store(World* world, const std::string& host, int port, Milliseconds timeout) {
  store::TcpStoreClientOptions o;
  o.connect_timeout = timeout;
  // The agent's proxy refuses connections without the attempt's token.
  if (const char* token = read_env_knob(EnvKnob::kStoreToken)) o.token = token;
  COHORT_ASSIGN_OR_RETURN(auto client, store::TcpStoreClient::connect(host, port, o));
  world->store = std::make_shared<store::PrefixStore>(
      std::shared_ptr<store::Store>(std::move(client)), "collective");
  return Status::ok();
}

// torchrun's rendezvous: rank 0 serves the store on `port` on all
// addresses (the others reach it by `master_addr`); every rank joins it.
Status join_master(World* world, const std::string& master_addr, int port, Milliseconds timeout) {
  if (world->rank == 0) {
    store::TcpStoreServerOptions so;
    so.host = "";
    so.port = port;
    COHORT_ASSIGN_OR_RETURN(world->server, store::TcpStoreServer::start(
                                              std::make_shared<store::MemoryStoreBackend>(), so));
  }
  COHORT_RETURN_IF_ERROR(join_store(world, master_addr, port, timeout));
  return connect_gloo(world, master_addr, timeout);
}

// Where MPI gives no local size: srun's tasks-per-node list.
Status mpi_local_size(World* world) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (env(var) == nullptr) continue;
    COHORT_ASSIGN_OR_RETURN(world->local_size, env_int(var, 1, true));
    return Status::ok();
  }
  auto penv = process_environment();
  if (!in_slurm_step(penv)) return Status::ok();
  for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const char* list = env(var);
    if (list == nullptr) continue;
    COHORT_ASSIGN_OR_RETURN(int node, env_int("SLURM_NODEID", 0, true));
    auto n = slurm_tasks_on_node(list, node);
    if (!n) return n.status().with_context(var);
    world->local_size = *n;
    return Status::ok();
  }
  return Status::ok();
}

}  // namespace

const char* launch_name(Launch launch) {
  switch (launch) {
    case Launch::kSingle:
      return "single process";
    case Launch::kCohort:
      return "cohort";
    case Launch::kTorchrun:
      return "torchrun-style";
    case Launch::kMpi:
      return "mpi";
    case Launch::kSlurm:
      return "slurm";
  }
  return "?";
}

Result<World> init_from_environment(const WorldOptions& options) {
  Milliseconds timeout = options.timeout;
  COHORT_ASSIGN_OR_RETURN(std::optional<int> seconds, read_env_knob_count(EnvKnob::kCollectiveTimeoutS));
  if (seconds) timeout = std::chrono::seconds(*seconds);
  World world;
  bool mpi_env = launched_by_mpi();
  const char* cohort_store = read_env_knob(EnvKnob::kStore);
  const char* master_addr = env("MASTER_ADDR");
  if (options.backend == CpuBackend::kMpi || (options.backend == CpuBackend::kAuto && mpi_env &&
                                              cohort_store == nullptr && master_addr == nullptr)) {
    MpiOptions o;
    o.timeout = timeout;
    COHORT_ASSIGN_OR_RETURN(auto comm, MpiCommunicator::create_world(o));
    world.launch = Launch::kMpi;
    world.rank = comm->rank();
    world.size = comm->size();
    // Open MPI, then MPICH/Hydra, then srun.
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
      if (env(var) == nullptr) continue;
      COHORT_ASSIGN_OR_RETURN(world.local_rank, env_int(var, 0, true));
      break;
    }
    COHORT_RETURN_IF_ERROR(mpi_local_size(&world));
    world.cpu = std::move(comm);
    return world;
  }
  if (cohort_store != nullptr) {
    world.launch = Launch::kCohort;
    COHORT_RETURN_IF_ERROR(read_ranks(&world));
    std::string host;
    int port = 0;
    COHORT_RETURN_IF_ERROR(
        store::parse_tcp_address(cohort_store, &host, &port).with_context("COHORT_STORE"));
    COHORT_RETURN_IF_ERROR(join_store(&world, host, port, timeout));
    COHORT_RETURN_IF_ERROR(connect_gloo(&world, host, timeout));
    return world;
  }
  // An srun step without MPI: Slurm's variables, unless torchrun's are there
  // (a torchrun started by srun sets RANK for its own workers).
  auto process_env = process_environment();
  if (in_slurm_step(process_env) && env("RANK") == nullptr) {
    auto task = read_slurm_task(process_env);
    if (!task) return task.status().with_context("an srun task");
    world.launch = Launch::kSlurm;
    world.rank = task->rank;
    world.size = task->size;
    world.local_rank = task->local_rank;
    world.local_size = task->local_size;
    COHORT_RETURN_IF_ERROR(join_master(&world, task->master_addr, task->master_port, timeout));
    return world;
  }
  if (master_addr != nullptr) {
    world.launch = Launch::kTorchrun;
    COHORT_RETURN_IF_ERROR(read_ranks(&world));
    COHORT_ASSIGN_OR_RETURN(int port, env_int("MASTER_PORT", 0, true));
    COHORT_RETURN_IF_ERROR(join_master(&world, master_addr, port, timeout));
    return world;
  }
  if (options.backend == CpuBackend::kGloo && mpi_env) {
    return invalid_argument(
        "an MPI launch has no store for Gloo: set COHORT_STORE or MASTER_ADDR/MASTER_PORT, or use "
        "the mpi backend");
  }
  world.store = store::make_memory_store();
  COHORT_RETURN_IF_ERROR(connect_gloo(&world, "127.0.0.1", timeout));
  return world;
}

}  // namespace cohort::collective
