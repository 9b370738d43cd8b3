// NCCL across two processes, each seeing only its own GPU
// (CUDA_VISIBLE_DEVICES), bootstrapped through Gloo and a store this test
// hosts: every operation of the matrix, and a killed peer. Skips, saying
// why, where fewer than two GPUs are visible. Run with `ctest -L gpu`.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <csignal>
#include <string>

#include "collective/store/tcp_store.h"
#include "tests/collective/process_group.h"

namespace cohort::collective::testing {
namespace {

using namespace std::chrono_literals;

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::vector<ProcessResult> run_nccl(const std::vector<std::string>& args,
                                    std::chrono::seconds timeout) {
  auto server = store::TcpStoreServer::start(std::make_shared<store::MemoryStoreBackend>(), {});
  EXPECT_TRUE(server.is_ok());
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < 2; ++r) {
    ProcessSpec spec;
    spec.argv = {test_binary("collective_worker"), "--backend", "nccl"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = {{"COHORT_STORE", (*server)->address()},
                {"RANK", std::to_string(r)},
                {"WORLD_SIZE", "2"},
                {"LOCAL_RANK", std::to_string(r)},
                {"LOCAL_WORLD_SIZE", "2"},
                {"CUDA_VISIBLE_DEVICES", std::to_string(r)},
                {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
    specs.push_back(spec);
  }
  return run_processes(specs, timeout);
}

#define REQUIRE_TWO_GPUS()                                                                \
  do {                                                                                    \
    int n = visible_gpus();                                                               \
    if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n << ": run on the GPU machine"; \
  } while (0)

TEST(NcclCollective, EveryOperationIsCorrectAcrossTwoGpus) {
  REQUIRE_TWO_GPUS();
  auto results = run_nccl({"--mode", "matrix", "--big", "1048576"}, 300s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("PASSED rank"), std::string::npos) << describe(results);
  }
}

TEST(NcclCollective, KilledPeerIsAbortedWithinTheTimeout) {
  REQUIRE_TWO_GPUS();
  // ncclCommAbort itself may take a few seconds after the timeout.
  auto results = run_nccl(
      {"--mode", "kill", "--victim", "1", "--timeout-ms", "5000", "--slack-ms", "15000"}, 120s);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_EQ(results[0].exit_code, 3) << describe(results);
  EXPECT_NE(results[0].output.find("all_reduce on group 'world'"), std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].output.find("ncclCommAbort"), std::string::npos) << describe(results);
}

// Under mpirun the unique id travels over MPI instead of a store.
TEST(NcclCollective, MpiLaunchSendsTheUniqueIdOverMpi) {
  REQUIRE_TWO_GPUS();
  ProcessSpec spec;
  spec.argv = {"mpirun",
               "--oversubscribe",
               "--allow-run-as-root",
               "--bind-to",
               "none",
               "-np",
               "2",
               test_binary("collective_worker"),
               "--backend",
               "nccl",
               "--mode",
               "matrix",
               "--big",
               "0"};
  spec.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
              {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
              {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"}};
  auto results = run_processes({spec}, 300s);
  EXPECT_EQ(results[0].exit_code, 0) << describe(results);
  EXPECT_NE(results[0].output.find("PASSED rank 1 of 2 (mpi)"), std::string::npos)
      << describe(results);
}

}  // namespace
}  // namespace cohort::collective::testing
