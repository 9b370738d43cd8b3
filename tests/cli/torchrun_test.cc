// `cohort run --nproc-per-node N -- PROGRAM ARGS...`: torchrun's launch line
// runs a command job with torchrun's environment, no job file needed.
#include <filesystem>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST(CliTorchrun, NprocPerNodeRunsTheProgramWithTheTorchrunEnvironment) {
  Cluster scratch;
  std::string script = scratch.dir() + "/script.py";
  write_file(script,
             "import os\n"
             "e = os.environ\n"
             "print(f\"{e['RANK']}/{e['WORLD_SIZE']} local {e['LOCAL_RANK']}/{e['LOCAL_WORLD_SIZE']} "
             "master {e['MASTER_ADDR']}:{e['MASTER_PORT']} run {e['TORCHELASTIC_RUN_ID']} args {os.sys.argv[1:]}\")\n");
  if (run_program({"python3", "--version"}).exit_code != 0) GTEST_SKIP() << "no python3 here";
  auto r = run_cohort({"run", "--nproc-per-node", "2", "--cpu-slots", "2", "--set",
                       "job.output_dir=" + scratch.dir() + "/out", "--", "python3", script, "--epochs", "3"},
                      60s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string prefix = "[rank " + std::to_string(rank) + "] " + std::to_string(rank) + "/2 local " +
                         std::to_string(rank) + "/2 master 127.0.0.1:";
    EXPECT_NE(r.out.find(prefix), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("args ['--epochs', '3']"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("job script succeeded"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(scratch.dir() + "/out/logs/attempt-0/rank-1.log"));
}

TEST(CliTorchrun, WithoutAProgramOrWithMoreNodesItSaysWhatToWrite) {
  auto none = run_cohort({"run", "--nproc-per-node", "2"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--nproc-per-node needs the program: cohort run --nproc-per-node 2 -- python3 train.py"),
            std::string::npos)
      << none.err;
  auto nodes = run_cohort({"run", "--nproc-per-node", "2", "--nnodes", "2", "--", "true"});
  EXPECT_EQ(nodes.exit_code, 2) << nodes.err;
  auto both = run_cohort({"run", "a.toml", "b.toml"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("give one job file"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace cohort::testing
