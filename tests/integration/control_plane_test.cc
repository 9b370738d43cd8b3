// The control plane end to end with real processes: a coordinator and
// agents (`--fake-gpus`) over loopback, jobs submitted with the CLI.
#include <signal.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

// "[rank 3] KEY=VALUE KEY=VALUE" lines → per-rank maps.
std::map<int, std::map<std::string, std::string>> parse_env_lines(const std::string& text) {
  std::map<int, std::map<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  std::regex prefix(R"(^\[rank (\d+)\] (.*)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, prefix)) continue;
    int rank = std::stoi(m[1]);
    std::istringstream words(m[2].str());
    std::string word;
    while (words >> word) {
      auto eq = word.find('=');
      if (eq != std::string::npos) out[rank][word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return out;
}

const char* kEnvCommand =
    "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK GROUP_RANK=$GROUP_RANK WORLD_SIZE=$WORLD_SIZE "
    "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE "
    "MASTER=$MASTER_ADDR:$MASTER_PORT CVD=$CUDA_VISIBLE_DEVICES ORDER=$CUDA_DEVICE_ORDER "
    "STORE=$COHORT_STORE ATTEMPT=$COHORT_ATTEMPT";

std::string env_job(const Cluster& c, const std::string& devices) {
  return "[job]\nname = \"env-" + devices + "\"\nkind = \"command\"\nnodes = 2\ngpus_per_node = 4\n"
         "devices = \"" + devices + "\"\noutput_dir = \"" + c.dir() + "/out-" + devices + "\"\n"
         "[command]\nargv = [\"sh\", \"-c\", \"" + kEnvCommand + "\"]\n";
}

class ControlPlane : public ::testing::TestWithParam<std::string> {};

TEST_P(ControlPlane, EightRanksOnTwoOfThreeNodesGetTheLaunchContract) {
  const std::string devices = GetParam();
  Cluster c;
  c.start_coordinator();
  for (const char* n : {"node-a", "node-b", "node-c"}) c.add_agent(n, 4);
  ASSERT_TRUE(c.wait_for_alive_nodes(3, 10s));
  auto job = c.write_job("env", env_job(c, devices));
  auto r = c.cli("submit", {job, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto ranks = parse_env_lines(r.out);
  ASSERT_EQ(ranks.size(), 8u) << r.out;
  std::set<std::string> masters, stores_by_node[2];
  for (int rank = 0; rank < 8; ++rank) {
    ASSERT_TRUE(ranks.count(rank)) << "rank " << rank << " missing:\n" << r.out;
    auto& env = ranks[rank];
    int local = rank % 4, node = rank / 4;
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(node));
    EXPECT_EQ(env["WORLD_SIZE"], "8");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["ORDER"], "PCI_BUS_ID");
    EXPECT_EQ(env["ATTEMPT"], "0");
    EXPECT_EQ(env["CVD"], devices == "own" ? std::to_string(local) : "0,1,2,3");
    masters.insert(env["MASTER"]);
    stores_by_node[node].insert(env["STORE"]);
    // Each rank's own log file holds its lines, prefixed with its rank.
    std::string log = read_file(c.dir() + "/out-" + devices + "/logs/attempt-0/rank-" +
                                std::to_string(rank) + ".log");
    EXPECT_NE(log.find("[rank " + std::to_string(rank) + "] RANK=" + std::to_string(rank)),
              std::string::npos)
        << log;
  }
  EXPECT_EQ(masters.size(), 1u);
  EXPECT_EQ(masters.begin()->rfind("127.0.0.1:", 0), 0u) << *masters.begin();
  // One store proxy per node for the attempt.
  EXPECT_EQ(stores_by_node[0].size(), 1u);
  EXPECT_EQ(stores_by_node[1].size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Devices, ControlPlane, ::testing::Values("own", "node"));

TEST(ControlPlaneJobs, AMissingProgramFailsTheJobNamingIt) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  auto job = c.write_job("missing",
                         "[job]\nname = \"missing\"\nkind = \"command\"\ngpus_per_node = 2\n"
                         "output_dir = \"" + c.dir() + "/out\"\n"
                         "[command]\nargv = [\"no-such-program-4711\"]\n");
  auto r = c.cli("submit", {job, "--wait"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("no-such-program-4711"), std::string::npos) << r.err;
  auto status = c.cli("status", {"missing"});
  EXPECT_NE(status.out.find("no-such-program-4711"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("root cause: rank"), std::string::npos) << status.out;
}

TEST(ControlPlaneJobs, AFailingRankGivesExitCodeOneAndItsLastLines) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  auto job = c.write_job("fail",
                         "[job]\nname = \"fail\"\nkind = \"command\"\ngpus_per_node = 2\n"
                         "output_dir = \"" + c.dir() + "/out\"\nstop_grace = 1.0\n"
                         "[command]\nargv = [\"sh\", \"-c\", \"if [ $RANK = 1 ]; then echo "
                         "about to fail; exit 3; fi; sleep 30\"]\n");
  auto r = c.cli("submit", {job, "--wait"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1 on node node-a: exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("about to fail"), std::string::npos) << r.err;
}

TEST(ControlPlaneJobs, AJobLargerThanTheClusterWaitsThenStartsWhenAnAgentJoins) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 4);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto job = c.write_job("big",
                         "[job]\nname = \"big\"\nkind = \"command\"\nnodes = 2\ngpus_per_node = 4\n"
                         "output_dir = \"" + c.dir() + "/out\"\n"
                         "[command]\nargv = [\"true\"]\n");
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(c.job_state(id), "queued");
  auto jobs = c.cli("jobs", {});
  EXPECT_NE(jobs.out.find("waiting for nodes: the cluster has 1 of 2"), std::string::npos) << jobs.out;
  c.add_agent("node-b", 4);
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 20s)) << c.job_state(id);
}

TEST(ControlPlaneJobs, CancelLeavesNoProcessBehind) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  std::string pids = c.dir() + "/pids";
  std::filesystem::create_directories(pids);
  // Each rank starts a child of its own, then waits: both must go.
  auto job = c.write_job("sleepy",
                         "[job]\nname = \"sleepy\"\nkind = \"command\"\ngpus_per_node = 2\n"
                         "output_dir = \"" + c.dir() + "/out\"\nstop_grace = 2.0\n"
                         "[command]\nargv = [\"sh\", \"-c\", \"sleep 300 & echo $$ $! > " + pids +
                         "/rank-$RANK.tmp; mv " + pids + "/rank-$RANK.tmp " + pids + "/rank-$RANK; wait\"]\n");
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  std::vector<pid_t> all;
  ASSERT_TRUE(wait_until([&] {
    return std::filesystem::exists(pids + "/rank-0") && std::filesystem::exists(pids + "/rank-1");
  }, 20s));
  for (int rank = 0; rank < 2; ++rank) {
    std::istringstream in(read_file(pids + "/rank-" + std::to_string(rank)));
    pid_t a, b;
    in >> a >> b;
    all.push_back(a);
    all.push_back(b);
  }
  for (pid_t p : all) EXPECT_TRUE(process_alive(p)) << p;
  auto cancel = c.cli("cancel", {id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "cancelled"; }, 20s)) << c.job_state(id);
  for (pid_t p : all) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << "pid " << p;
}

TEST(ControlPlaneJobs, RanksMeetThroughTheStoreAcrossNodes) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  c.add_agent("node-b", 2);
  std::string tool = std::string(COHORT_BINARY_DIR) + "/tests/store_rank_tool";
  auto job = c.write_job("store",
                         "[job]\nname = \"store\"\nkind = \"command\"\nnodes = 2\ngpus_per_node = 2\n"
                         "output_dir = \"" + c.dir() + "/out\"\n"
                         "[command]\nargv = [\"" + tool + "\"]\n");
  auto r = c.cli("submit", {job, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("[rank " + std::to_string(rank) + "] store ok rank " +
                         std::to_string(rank) + " sum 6"),
              std::string::npos)
        << r.out;
  }
}

TEST(ControlPlaneJobs, LogsServeRanksAndAttemptsAndStatusLists) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  auto job = c.write_job("hello",
                         "[job]\nname = \"hello\"\nkind = \"command\"\ngpus_per_node = 2\n"
                         "output_dir = \"" + c.dir() + "/out\"\n"
                         "[command]\nargv = [\"sh\", \"-c\", \"echo hello from $RANK\"]\n");
  auto r = c.cli("submit", {job, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  auto logs = c.cli("logs", {id, "--rank", "1"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_NE(logs.out.find("[rank 1] hello from 1"), std::string::npos) << logs.out;
  EXPECT_EQ(logs.out.find("[rank 0]"), std::string::npos) << logs.out;
  auto none = c.cli("logs", {id, "--attempt", "5"});
  EXPECT_EQ(none.out, "");
  auto nodes = c.cli("nodes", {});
  EXPECT_NE(nodes.out.find("node-a"), std::string::npos);
  auto missing = c.cli("status", {"no-such-job"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

TEST(ControlPlaneJobs, LogsFollowPrintsLinesAsTheyComeUntilTheJobEnds) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  auto job = c.write_job("ticker",
                         "[job]\nname = \"ticker\"\nkind = \"command\"\n"
                         "output_dir = \"" + c.dir() + "/out\"\n"
                         "[command]\nargv = [\"sh\", \"-c\", \"for i in 1 2 3 4 5; do echo tick $i; "
                         "sleep 0.2; done\"]\n");
  auto r = c.cli("submit", {job});
  std::string id = r.out.substr(0, r.out.find('\n'));
  auto follow = c.cli("logs", {id, "--follow"}, 30s);
  EXPECT_EQ(follow.exit_code, 0) << follow.err;
  for (int i = 1; i <= 5; ++i) {
    EXPECT_NE(follow.out.find("[rank 0] tick " + std::to_string(i)), std::string::npos) << follow.out;
  }
  EXPECT_EQ(c.job_state(id), "succeeded");
}

TEST(ControlPlaneCli, AnUnreachableCoordinatorGivesExitCodeThree) {
  Cluster c;  // nothing started
  auto r = run_cohort({"jobs", "--coordinator", c.endpoint()}, 30s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

TEST(ControlPlaneCli, AnInvalidJobFileGivesExitCodeTwo) {
  Cluster c;
  auto job = c.write_job("bad", "[job]\nname = \"bad\"\nkind = \"command\"\nnodez = 2\n");
  auto r = run_cohort({"submit", job, "--coordinator", c.endpoint()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace cohort::testing

namespace cohort::testing {
namespace {

TEST(CohortRun, TheCommandExampleShowsEveryRanksEnvironment) {
  Cluster c;  // only for its temporary directory
  std::string example = std::string(COHORT_SOURCE_DIR) + "/jobs/examples/print_env.toml";
  auto r = run_cohort({"run", example, "--fake-gpus", "2", "--set", "job.output_dir=" + c.dir() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_NE(r.out.find(p + "RANK=" + std::to_string(rank)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "LOCAL_RANK=" + std::to_string(rank)), std::string::npos);
    EXPECT_NE(r.out.find(p + "WORLD_SIZE=2"), std::string::npos);
    EXPECT_NE(r.out.find(p + "CUDA_VISIBLE_DEVICES=0,1"), std::string::npos);  // devices = node
    EXPECT_NE(r.out.find(p + "CUDA_DEVICE_ORDER=PCI_BUS_ID"), std::string::npos);
    EXPECT_NE(r.out.find(p + "COHORT_STORE=tcp://127.0.0.1:"), std::string::npos);
  }
  EXPECT_TRUE(std::filesystem::exists(c.dir() + "/run/logs/attempt-0/rank-1.log"));
}

TEST(CohortRun, ExitsOneWhenTheJobFails) {
  Cluster c;
  auto job = c.write_job("fails", "[job]\nname = \"fails\"\nkind = \"command\"\noutput_dir = \"" + c.dir() +
                                      "/out\"\n[command]\nargv = [\"sh\", \"-c\", \"exit 4\"]\n");
  auto r = run_cohort({"run", job, "--cpu-slots", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("exited with code 4"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cohort::testing

namespace cohort::testing {
namespace {

TEST(CohortRun, ATrainJobRunsCohortWorkerOnEveryRank) {
  std::string worker = std::string(COHORT_BINARY_DIR) + "/bin/cohort-worker";
  if (!std::filesystem::exists(worker)) GTEST_SKIP() << "cohort-worker is not built in this tree";
  Cluster c;
  std::string corpus;
  for (int i = 0; i < 400; ++i) corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write_file(c.dir() + "/corpus.txt", corpus);
  std::string example = std::string(COHORT_SOURCE_DIR) + "/jobs/examples/quickstart.toml";
  auto r = run_cohort({"run", example, "--cpu-slots", "2", "--set", "job.output_dir=" + c.dir() + "/qs",
                       "--set", "train.data=" + c.dir() + "/corpus.txt", "--set", "train.steps=3",
                       "--set", "train.warmup_steps=1",
                       "--set", "train.eval_every=0", "--set", "train.checkpoint_every=0",
                       "--set", "train.sample_tokens=0", "--set", "train.precision=fp32"},
                      std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Rank 0 speaks for the job (rank 1 trains silently).
  EXPECT_NE(r.out.find("[rank 0]"), std::string::npos);
  EXPECT_NE(r.out.find("world 2"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(c.dir() + "/qs/job.resolved.toml"));
}

TEST(CohortRun, AWorkerBinaryThatIsNotThereIsRefusedAtStart) {
  Cluster c;
  std::string example = std::string(COHORT_SOURCE_DIR) + "/jobs/examples/quickstart.toml";
  auto r = run_cohort({"run", example, "--cpu-slots", "2", "--worker-binary", c.dir() + "/no/cohort-worker",
                       "--set", "job.output_dir=" + c.dir() + "/qs"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--worker-binary " + c.dir() + "/no/cohort-worker: No such file or directory"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace cohort::testing
