// The collective matrix across real processes: backend {gloo, mpi} × world
// size {1, 2, 3, 4, 8}, each rank running collective_worker's whole
// operation × dtype × count list; plus peers that die or fall silent.
//
// The 1<<20-element cases run only for world sizes up to 4 and for a subset
// (f32, bf16, i32 × all_reduce sum, reduce_scatter sum, all_gather): eight
// ranks on a two-core CI machine would otherwise take minutes.
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "collective/slurm_launch.h"
#include "collective/store/tcp_store.h"
#include "tests/collective/process_group.h"

namespace cohort::collective::testing {
namespace {

using namespace std::chrono_literals;

// Gloo ranks, bootstrapped as cohort's agent would: COHORT_STORE pointing
// at a TcpStoreServer this test hosts.
std::vector<ProcessResult> run_gloo(int world, const std::vector<std::string>& args,
                                    std::chrono::seconds timeout) {
  auto server = store::TcpStoreServer::start(std::make_shared<store::MemoryStoreBackend>(), {});
  EXPECT_TRUE(server.is_ok()) << server.status().to_string();
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < world; ++r) {
    ProcessSpec spec;
    spec.argv = {test_binary("collective_worker"), "--backend", "gloo"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = {{"COHORT_STORE", (*server)->address()},
                {"RANK", std::to_string(r)},
                {"WORLD_SIZE", std::to_string(world)},
                {"LOCAL_RANK", std::to_string(r)},
                {"LOCAL_WORLD_SIZE", std::to_string(world)}};
    specs.push_back(spec);
  }
  return run_processes(specs, timeout);
}

// MPI ranks through mpirun (as root in CI, hence the allow flags).
std::vector<ProcessResult> run_mpi(int world, const std::vector<std::string>& args,
                                   std::chrono::seconds timeout) {
  ProcessSpec spec;
  spec.argv = {"mpirun",
               "--oversubscribe",
               "--allow-run-as-root",
               "--bind-to",
               "none",
               "-np",
               std::to_string(world),
               test_binary("collective_worker"),
               "--backend",
               "mpi"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
              {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
              // Containers often forbid the cross-memory attach vader uses.
              {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
              {"OMPI_MCA_rmaps_base_oversubscribe", "1"}};
  return run_processes({spec}, timeout);
}

class CollectiveMatrix : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CollectiveMatrix, EveryOperationDtypeAndCountIsCorrect) {
  auto [backend, world] = GetParam();
  std::vector<std::string> args = {"--mode", "matrix", "--big", world <= 4 ? "1048576" : "0"};
  auto results = backend == "gloo" ? run_gloo(world, args, 200s) : run_mpi(world, args, 200s);
  int passed = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    for (size_t p = r.output.find("PASSED rank"); p != std::string::npos;
         p = r.output.find("PASSED rank", p + 1)) {
      ++passed;
    }
  }
  EXPECT_EQ(passed, world) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(BackendByWorldSize, CollectiveMatrix,
                         ::testing::Combine(::testing::Values("gloo", "mpi"),
                                            ::testing::Values(1, 2, 3, 4, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Every survivor must exit 3 (failed within the timeout) with an error that
// names the operation, the group and the timeout.
void expect_survivors_failed(const std::vector<ProcessResult>& results, int survivors) {
  std::string all;
  for (const auto& r : results) all += r.output;
  int found = 0;
  for (size_t p = all.find("SURVIVOR rank"); p != std::string::npos;
       p = all.find("SURVIVOR rank", p + 1)) {
    std::string line = all.substr(p, all.find('\n', p) - p);
    EXPECT_NE(line.find("all_reduce on group 'world'"), std::string::npos) << line;
    EXPECT_NE(line.find("timeout 2000 ms"), std::string::npos) << line;
    ++found;
  }
  EXPECT_EQ(found, survivors) << describe(results);
  for (const auto& r : results) EXPECT_FALSE(r.timed_out) << describe(results);
}

TEST(CollectiveFaults, GlooKilledPeerFailsSurvivorsWithinTimeout) {
  auto results = run_gloo(4, {"--mode", "kill", "--victim", "2", "--timeout-ms", "2000"}, 60s);
  expect_survivors_failed(results, 3);
  EXPECT_EQ(results[2].signal, SIGKILL) << describe(results);
  for (int r : {0, 1, 3}) EXPECT_EQ(results[r].exit_code, 3) << describe(results);
}

TEST(CollectiveFaults, GlooSilentPeerTimesOutSurvivors) {
  auto results = run_gloo(3, {"--mode", "hang", "--victim", "0", "--timeout-ms", "2000"}, 60s);
  expect_survivors_failed(results, 2);
  for (int r : {1, 2}) EXPECT_EQ(results[r].exit_code, 3) << describe(results);
}

TEST(CollectiveFaults, MpiSilentPeerTimesOutSurvivors) {
  auto results = run_mpi(3, {"--mode", "hang", "--victim", "1", "--timeout-ms", "2000"}, 60s);
  expect_survivors_failed(results, 2);
}

// torchrun-style: rank 0 serves the store on MASTER_PORT.
TEST(CollectiveBootstrap, TorchrunStyleRankZeroServesTheStore) {
  int port = 0;
  {
    // A port that was free a moment ago.
    auto probe = store::TcpStoreServer::start(std::make_shared<store::MemoryStoreBackend>(), {});
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < 3; ++r) {
    ProcessSpec spec;
    spec.argv = {
        test_binary("collective_worker"), "--backend", "gloo", "--mode", "matrix", "--big", "0"};
    spec.env = {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"RANK", std::to_string(r)},
                {"WORLD_SIZE", "3"}};
    specs.push_back(spec);
  }
  auto results = run_processes(specs, 120s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("(torchrun-style)"), std::string::npos) << describe(results);
  }
}

// `srun -n 3` without MPI: ranks from SLURM_*, the master is the step's first
// host and the port comes from the job and step ids (no MASTER_* given).
TEST(CollectiveBootstrap, SrunTasksWithoutMpiJoinThroughTaskZero) {
  // A job id whose derived port is free now.
  int job_id = 0;
  for (int candidate = 7001 + ::getpid() % 5000; job_id == 0; ++candidate) {
    store::TcpStoreServerOptions so;
    so.port = slurm_default_master_port(candidate, 2);
    if (store::TcpStoreServer::start(std::make_shared<store::MemoryStoreBackend>(), so).is_ok())
      job_id = candidate;
  }
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < 3; ++r) {
    ProcessSpec spec;
    spec.argv = {
        test_binary("collective_worker"), "--backend", "gloo", "--mode", "matrix", "--big", "0"};
    spec.env = {{"SLURM_JOB_ID", std::to_string(job_id)},
                {"SLURM_STEP_ID", "2"},
                {"SLURM_PROCID", std::to_string(r)},
                {"SLURM_NTASKS", "3"},
                {"SLURM_LOCALID", std::to_string(r)},
                {"SLURM_NODEID", "0"},
                {"SLURM_STEP_TASKS_PER_NODE", "3"},
                {"SLURM_STEP_NODELIST", "localhost"}};
    specs.push_back(spec);
  }
  auto results = run_processes(specs, 120s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("(slurm)"), std::string::npos) << describe(results);
  }
}

}  // namespace
}  // namespace cohort::collective::testing
