// The supervisor with a FakeProcessLauncher and a ManualClock: what it
// spawns, what it reports, how it stops, and how it detects hangs.
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "agent/fake_process_launcher.h"
#include "agent/supervisor.h"
#include "collective/store/tcp_store.h"
#include "tests/jobs/job_files.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-sup-XXXXXX";
    dir_ = ::mkdtemp(templ);
    make_supervisor(false, "");
  }
  void TearDown() override {
    supervisor_.reset();
    fs::remove_all(dir_);
  }
  void make_supervisor(bool cpu_slots, const std::string& worker_binary, jobs::PortRange ports = {}) {
    SupervisorOptions options{"node-x", worker_binary, cpu_slots, "127.0.0.1", ports};
    // The store is not exercised here: requests fail at once.
    StoreForward forward = [](protocol::StoreRequest, std::function<void(Result<protocol::StoreReply>)> done) {
      done(unavailable("no coordinator in this test"));
    };
    SupervisorSink sink{[this](const std::string&, protocol::LogLine l) { lines_.push_back(l); },
                        [this](protocol::WorkerExit e) { exits_.push_back(e); },
                        [this](protocol::WorkersStarted s) { started_.push_back(s); }};
    supervisor_ = std::make_unique<Supervisor>(io_, launcher_, clock_, options, forward, sink);
  }
  // The job of the orders below: two ranks per node, node rank 1 of 2.
  jobs::JobSpec spec(jobs::JobKind kind = jobs::JobKind::kCommand) {
    jobs::JobSpec s = kind == jobs::JobKind::kTrain ? jobs::testing::train_job("t", 2, 2)
                                                    : jobs::testing::command_job("t", 2, 2);
    s.job.devices = jobs::DeviceVisibility::kOwn;
    s.job.output_dir = dir_ + "/out";
    s.job.working_dir = dir_;
    s.job.stop_grace_s = 1.5;
    if (kind == jobs::JobKind::kCommand) s.command.argv = {"python3", "train.py"};
    s.job.env = {{"MY_VAR", "42"}};
    return s;
  }
  protocol::LaunchOrder order(const jobs::JobSpec& job) {
    protocol::LaunchOrder o;
    o.job_id = "job-1";
    o.attempt = 0;
    o.node_rank = 1;
    o.num_nodes = 2;
    o.world_size = 4;
    o.gpu_indices = {2, 3};
    o.master_addr = "10.0.0.1";
    o.master_port = 29500;
    o.job_toml = jobs::to_toml(job);
    return o;
  }
  protocol::LaunchOrder order(jobs::JobKind kind = jobs::JobKind::kCommand) { return order(spec(kind)); }
  void pump() {
    io_.restart();
    io_.poll();
  }

  std::string dir_;
  boost::asio::io_context io_;
  FakeProcessLauncher launcher_;
  ManualClock clock_;
  std::unique_ptr<Supervisor> supervisor_;
  std::vector<protocol::LogLine> lines_;
  std::vector<protocol::WorkerExit> exits_;
  std::vector<protocol::WorkersStarted> started_;
};

TEST_F(SupervisorTest, EachLocalRankGetsItsRankGpuAndTheJobsEnvironment) {
  supervisor_->launch(order());
  ASSERT_EQ(launcher_.spawn_count(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto r = launcher_.record(i);
    EXPECT_EQ(r.options.argv, (std::vector<std::string>{"python3", "train.py"}));
    EXPECT_EQ(r.options.working_dir, dir_);
    EXPECT_EQ(r.options.group, "job-1-0") << "the attempt's cgroup, under cgroup containment";
    EXPECT_EQ(r.options.name, "rank-" + std::to_string(2 + i));
    auto& env = r.options.env;
    EXPECT_EQ(env["RANK"], std::to_string(2 + i));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(i));
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], std::to_string(2 + i));
    EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
    EXPECT_EQ(env["MY_VAR"], "42");
    EXPECT_EQ(env["COHORT_STORE"].rfind("tcp://127.0.0.1:", 0), 0u) << env["COHORT_STORE"];
    EXPECT_FALSE(env["COHORT_PROGRESS_FILE"].empty());
  }
  auto running = supervisor_->running();
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].rank, 2);
  // A repeated order starts nothing new.
  supervisor_->launch(order());
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

TEST_F(SupervisorTest, CpuSlotsHideEveryGpu) {
  make_supervisor(true, "");
  supervisor_->launch(order());
  ASSERT_EQ(launcher_.spawn_count(), 2u);
  EXPECT_EQ(launcher_.record(0).options.env["CUDA_VISIBLE_DEVICES"], "");
}

TEST_F(SupervisorTest, ExitsAreReportedWithTheirLastLinesAndLogFiles) {
  supervisor_->launch(order());
  launcher_.emit_line(1, OutputStream::kStderr, "Traceback: it broke");
  launcher_.exit(1, ExitStatus::exited(3));
  pump();
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].rank, 3);
  EXPECT_EQ(exits_[0].node, "node-x");
  EXPECT_EQ(exits_[0].exit_code, 3);
  EXPECT_FALSE(exits_[0].stopped);
  EXPECT_EQ(exits_[0].last_lines, std::vector<std::string>{"Traceback: it broke"});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rank, 3);
  std::ifstream log(dir_ + "/out/logs/attempt-0/rank-3.log");
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "[rank 3] Traceback: it broke");
  EXPECT_EQ(supervisor_->running().size(), 1u);
  launcher_.exit(0, ExitStatus::exited(0));
  pump();
  EXPECT_TRUE(supervisor_->running().empty());
}

TEST_F(SupervisorTest, StopGivesEachWorkerItsGraceAndReportsItStopped) {
  supervisor_->launch(order());
  supervisor_->stop("job-1", 0, "cancelled");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(launcher_.record(i).stops, std::vector<std::chrono::milliseconds>{1500ms});
    launcher_.exit(i, ExitStatus::killed(SIGTERM));
  }
  pump();
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_TRUE(exits_[0].stopped);
  EXPECT_EQ(exits_[0].signal, SIGTERM);
  // Stopping another attempt touches nothing.
  supervisor_->launch(order());
  supervisor_->stop("job-1", 5, "old attempt");
  EXPECT_TRUE(launcher_.record(2).stops.empty());
}

TEST_F(SupervisorTest, ARankWithoutProgressForHangTimeoutIsStoppedAsHung) {
  auto job = spec();
  job.job.hang_timeout_s = 5;
  supervisor_->launch(order(job));
  std::string progress = launcher_.record(0).options.env["COHORT_PROGRESS_FILE"];
  clock_.advance(4s);
  supervisor_->check_progress();
  EXPECT_TRUE(launcher_.record(0).stops.empty());
  // Rank 2 reports progress (a new mtime); rank 3 does not.
  std::ofstream(progress) << "step 1";
  supervisor_->check_progress();
  clock_.advance(2s);
  supervisor_->check_progress();
  EXPECT_TRUE(launcher_.record(0).stops.empty());
  EXPECT_EQ(launcher_.record(1).stops.size(), 1u);
  launcher_.exit(1, ExitStatus::killed(SIGTERM));
  pump();
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_FALSE(exits_[0].stopped);
  EXPECT_NE(exits_[0].failure.find("hung"), std::string::npos) << exits_[0].failure;
}

TEST_F(SupervisorTest, AProgressKeySetThroughTheStoreCountsAsProgress) {
  auto job = spec();
  job.job.hang_timeout_s = 5;
  supervisor_->launch(order(job));
  std::string host;
  int port = 0;
  ASSERT_TRUE(store::parse_tcp_address(launcher_.record(1).options.env["COHORT_STORE"], &host, &port));
  auto client = store::TcpStoreClient::connect(host, port);
  ASSERT_TRUE(client) << client.status().message();
  clock_.advance(4s);
  // The coordinator is absent here, so the set itself fails; the agent has
  // seen the report all the same.
  (void)(*client)->set("cohort/progress/3", "step 7");
  pump();
  clock_.advance(2s);
  supervisor_->check_progress();
  EXPECT_EQ(launcher_.record(0).stops.size(), 1u);  // rank 2: silent for 6 s
  EXPECT_TRUE(launcher_.record(1).stops.empty());   // rank 3: reported 2 s ago
}

TEST_F(SupervisorTest, ATrainJobWithoutCohortWorkerFailsWithAClearMessage) {
  make_supervisor(false, dir_ + "/bin/cohort-worker");
  supervisor_->launch(order(jobs::JobKind::kTrain));
  EXPECT_EQ(launcher_.spawn_count(), 0u);
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_NE(exits_[0].failure.find("cohort-worker, which is not built"), std::string::npos)
      << exits_[0].failure;
  EXPECT_NE(exits_[0].failure.find(dir_ + "/bin/cohort-worker"), std::string::npos);
}

TEST_F(SupervisorTest, ATrainJobRunsCohortWorkerOnTheResolvedJobFile) {
  fs::create_directories(dir_ + "/bin");
  std::string worker = dir_ + "/bin/cohort-worker";
  std::ofstream(worker) << "#!/bin/sh\n";
  fs::permissions(worker, fs::perms::owner_all);
  make_supervisor(false, worker);
  auto o = order(jobs::JobKind::kTrain);
  supervisor_->launch(o);
  ASSERT_EQ(launcher_.spawn_count(), 2u);
  auto argv = launcher_.record(0).options.argv;
  ASSERT_EQ(argv.size(), 2u);
  EXPECT_EQ(argv[0], worker);
  EXPECT_EQ(argv[1], dir_ + "/out/job.resolved.toml");
  std::ifstream toml(argv[1]);
  std::stringstream text;
  text << toml.rdbuf();
  EXPECT_EQ(text.str(), o.job_toml) << "cohort-worker reads the file as submitted";
  // It holds [job.env] values and a serve job's api_key: the owner's only.
  EXPECT_EQ(fs::status(argv[1]).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(SupervisorTest, ASpawnFailureIsReportedNamingTheProgram) {
  launcher_.fail_next_spawn(not_found("cannot run 'python3': not found in PATH"));
  supervisor_->launch(order());
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].rank, 2);
  EXPECT_NE(exits_[0].failure.find("python3"), std::string::npos);
  EXPECT_EQ(launcher_.spawn_count(), 1u);  // rank 3 still started
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

TEST_F(SupervisorTest, NonsensicalLaunchOrdersAreReportedNotFatal) {
  std::vector<protocol::LaunchOrder> bad(8, order());
  auto no_gpus = spec();
  no_gpus.job.gpus_per_node = 0;
  bad[0] = order(no_gpus);
  bad[0].gpu_indices.clear();
  bad[1].node_rank = -3;
  bad[2].world_size = 0;
  bad[3].gpu_indices = {0};  // one GPU for two workers
  bad[4].job_toml = "[job\nname = ";
  bad[5].master_port = -1;
  bad[6].job_toml.clear();
  bad[7].job_toml = std::string(2 << 20, '#');
  for (size_t i = 0; i < bad.size(); ++i) {
    bad[i].attempt = int(i) + 10;
    supervisor_->launch(bad[i]);
  }
  EXPECT_EQ(launcher_.spawn_count(), 0u);
  EXPECT_GE(exits_.size(), 11u);  // two ranks each, but for the order that names no GPU
  for (const auto& e : exits_) EXPECT_FALSE(e.failure.empty());
  // A job file that does not load is named as the cause.
  bool named = false;
  for (const auto& e : exits_) named |= e.attempt == 14 && e.failure.find("job.resolved.toml:") != std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_TRUE(supervisor_->running().empty());
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

TEST_F(SupervisorTest, RankZerosNodePicksMasterPortAndHoldsItUntilItsWorkersExit) {
  // The agent's range, narrowed by the job's: one port left for each of two jobs. Below the
  // kernel's ephemeral ports (32768+), so no outgoing connection of a test running beside this
  // one can be holding either.
  make_supervisor(false, "", jobs::PortRange{31170, 31171});
  auto job = spec();
  job.job.port_range = "31100-31171";
  auto first = order(job);
  first.node_rank = 0;
  first.master_port = 0;  // the coordinator leaves it to this node
  supervisor_->launch(first);
  ASSERT_EQ(started_.size(), 1u);
  int port = started_[0].master_port;
  EXPECT_TRUE(port == 31170 || port == 31171) << port;
  EXPECT_EQ(started_[0].job_id, "job-1");
  EXPECT_EQ(started_[0].node, "node-x");
  EXPECT_EQ(launcher_.record(0).options.env["MASTER_PORT"], std::to_string(port));
  EXPECT_EQ(launcher_.record(1).options.env["MASTER_PORT"], std::to_string(port));
  // Each job its own output folder (node rank 0 locks it).
  auto elsewhere = [&](const std::string& id) {
    auto other_job = job;
    other_job.job.output_dir = dir_ + "/" + id;
    auto o = first;
    o.job_id = id;
    o.job_toml = jobs::to_toml(other_job);
    return o;
  };
  // A second job on this node while the first runs gets the other port.
  auto second = elsewhere("job-2");
  supervisor_->launch(second);
  ASSERT_EQ(started_.size(), 2u);
  EXPECT_EQ(started_[1].master_port, port == 31170 ? 31171 : 31170);
  // A third finds none free and says so as the ranks' failure.
  auto third = elsewhere("job-3");
  supervisor_->launch(third);
  EXPECT_EQ(started_.size(), 2u);
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_NE(exits_[0].failure.find("no free port for MASTER_PORT in 31170-31171"), std::string::npos)
      << exits_[0].failure;
  // Once job-1's workers are gone its port is free for the next job.
  launcher_.exit(0, ExitStatus::exited(0));
  launcher_.exit(1, ExitStatus::exited(0));
  pump();
  auto fourth = elsewhere("job-4");
  supervisor_->launch(fourth);
  ASSERT_EQ(started_.size(), 3u);
  EXPECT_EQ(started_[2].master_port, port);
}

TEST_F(SupervisorTest, ARefusedOrderStartsNothingAndReportsItsRanksStopped) {
  supervisor_->refuse(order(), "not started: the agent on node-x is leaving the cluster");
  EXPECT_EQ(launcher_.spawn_count(), 0u);
  ASSERT_EQ(exits_.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(exits_[i].rank, int(2 + i));
    EXPECT_TRUE(exits_[i].stopped);  // a drain, not a failure
    EXPECT_TRUE(exits_[i].failure.empty());
    EXPECT_EQ(exits_[i].last_lines, std::vector<std::string>{"not started: the agent on node-x is leaving the cluster"});
  }
  EXPECT_TRUE(supervisor_->running().empty());
}

TEST_F(SupervisorTest, OtherNodesUseTheMasterPortTheirOrderNames) {
  supervisor_->launch(order());  // node rank 1, master_port 29500
  EXPECT_TRUE(started_.empty());
  EXPECT_EQ(launcher_.record(0).options.env["MASTER_PORT"], "29500");
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

// Node rank 0 holds the job's output_dir (output_dir_lock.h): another job
// or another process is refused there, naming the folder and its holder; the
// job's own next attempt keeps it.
TEST_F(SupervisorTest, NodeRankZeroLocksTheOutputFolderAgainstOtherJobsAndProcesses) {
  auto first = order();
  first.node_rank = 0;
  first.gpu_indices = {0, 1};
  supervisor_->launch(first);
  ASSERT_EQ(launcher_.spawn_count(), 2u);
  EXPECT_NE(OutputDirLock::holder_of(dir_ + "/out").find("job-1 on node node-x"), std::string::npos);
  // Another job on the same folder, here: refused, its ranks reported failed.
  auto other = first;
  other.job_id = "job-2";
  supervisor_->launch(other);
  EXPECT_EQ(launcher_.spawn_count(), 2u);
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_NE(exits_[0].failure.find("output_dir " + dir_ + "/out is in use by job-1"), std::string::npos)
      << exits_[0].failure;
  // Another process (another `cohort run`, another cluster): refused too.
  auto outside = OutputDirLock::acquire(dir_ + "/out", "elsewhere");
  EXPECT_FALSE(outside);
  // The job's own restart while attempt 0 still winds down: allowed.
  auto restart = first;
  restart.attempt = 1;
  supervisor_->launch(restart);
  EXPECT_EQ(launcher_.spawn_count(), 4u);
  for (size_t i = 0; i < 4; ++i) launcher_.exit(i, ExitStatus::exited(0));
  pump();
  EXPECT_EQ(OutputDirLock::holder_of(dir_ + "/out"), "");  // released with the last worker
}

TEST_F(SupervisorTest, OtherNodeRanksTakeNoLockOnSharedStorage) {
  auto held = OutputDirLock::acquire((fs::create_directories(dir_ + "/out"), dir_ + "/out"), "rank 0's node");
  ASSERT_TRUE(held);
  supervisor_->launch(order());  // node rank 1
  EXPECT_EQ(launcher_.spawn_count(), 2u);
}

}  // namespace
}  // namespace cohort::agent
