// `cohort-worker JOB.toml --set ...` run directly (no agent), alone and as the
// tasks of an `srun -n 2` step: the Slurm variables are set by the test.
#include <unistd.h>

#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "cluster_harness.h"
#include "collective/slurm_launch.h"
#include "collective/store/tcp_store.h"

namespace store = cohort::store;

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

std::string worker_binary() { return std::string(COHORT_BINARY_DIR) + "/bin/cohort-worker"; }

class WorkerLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string corpus;
    for (int i = 0; i < 400; ++i) corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    write_file(dir() + "/corpus.txt", corpus);
  }
  const std::string& dir() const { return scratch_.dir(); }

  // The quickstart example, cut down to 3 CPU steps by --set.
  std::vector<std::string> argv(const std::string& out) const {
    return {worker_binary(), std::string(COHORT_SOURCE_DIR) + "/jobs/examples/quickstart.toml",
            "--set", "job.output_dir=" + out, "--set", "train.data=" + dir() + "/corpus.txt",
            "--set", "train.steps=3", "--set", "train.warmup_steps=1", "--set", "train.eval_every=0",
            "--set", "train.checkpoint_every=0", "--set", "train.sample_tokens=0",
            "--set", "train.precision=fp32", "--set", "train.log_every=1"};
  }

  Cluster scratch_;  // only its temporary directory
};

TEST_F(WorkerLaunch, SetOverridesTheJobFile) {
  auto p = Process::start(argv(dir() + "/alone"), dir() + "/alone.log");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->wait(120s), 0) << p->output();
  std::string metrics = read_file(dir() + "/alone/metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\":3"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("\"step\":4"), std::string::npos) << metrics;
  EXPECT_NE(p->output().find("joined a world of 1 ranks"), std::string::npos) << p->output();
}

TEST_F(WorkerLaunch, ABadSetIsNamedAndExitsWithUsage) {
  auto args = argv(dir() + "/bad");
  args.push_back("--set");
  args.push_back("train.steps=many");
  auto p = Process::start(args, dir() + "/bad.log");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->wait(30s), 2) << p->output();
  EXPECT_NE(p->output().find("--set train.steps=many"), std::string::npos) << p->output();
  auto q = Process::start({worker_binary(), dir() + "/corpus.txt", "--set", "no-equals-sign"}, dir() + "/q.log");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->wait(30s), 2) << q->output();
  EXPECT_NE(q->output().find("no-equals-sign"), std::string::npos) << q->output();
}

// Two tasks of `srun -N 1 -n 2 cohort-worker quickstart.toml --set ...`
// without MPI: ranks from SLURM_*, task 0 serves the store on the port the
// job and step ids give, Gloo between them.
TEST_F(WorkerLaunch, SrunTasksTrainAsOneWorld) {
  int job_id = 0;
  for (int candidate = 9001 + ::getpid() % 5000; job_id == 0; ++candidate) {
    store::TcpStoreServerOptions so;
    so.port = collective::slurm_default_master_port(candidate, 0);
    if (store::TcpStoreServer::start(std::make_shared<store::MemoryStoreBackend>(), so))
      job_id = candidate;
  }
  std::vector<std::unique_ptr<Process>> tasks;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env = {{"SLURM_JOB_ID", std::to_string(job_id)},
                                              {"SLURM_STEP_ID", "0"},
                                              {"SLURM_PROCID", std::to_string(r)},
                                              {"SLURM_NTASKS", "2"},
                                              {"SLURM_LOCALID", std::to_string(r)},
                                              {"SLURM_NODEID", "0"},
                                              {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                              {"SLURM_STEP_NODELIST", "localhost"}};
    tasks.push_back(Process::start(argv(dir() + "/srun"), dir() + "/task-" + std::to_string(r) + ".log", env));
    ASSERT_TRUE(tasks.back());
  }
  for (auto& t : tasks) EXPECT_EQ(t->wait(150s), 0) << t->output();
  std::string rank0 = tasks[0]->output();
  EXPECT_NE(rank0.find("joined a world of 2 ranks, 2 per node (slurm launch)"), std::string::npos) << rank0;
  EXPECT_NE(read_file(dir() + "/srun/metrics.jsonl").find("\"step\":3"), std::string::npos);
}

}  // namespace
}  // namespace cohort::testing
