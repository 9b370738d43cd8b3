// A cluster over a real network: the coordinator and three agents, each in
// its own network namespace on a bridge (netns_network.h), CURVE keys with
// roles, addresses off loopback that nobody configured. A 3-node training
// job over Gloo; an elastic job through a partition of one node (noticed
// within 3 s, the job shrinks, the node's workers are stopped by its own
// agent, and the job grows back when the link heals without using restart
// budget); a coordinator killed and restarted while the agents are across
// the network. Skips where namespaces cannot be made (not root, no `ip`).
#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_harness.h"
#include "netns_network.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::vector<std::string> kNodes = {"n1", "n2", "n3"};

class NetworkCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    net_ = NetnsNetwork::create({"coord", "n1", "n2", "n3"}, &why);
    if (!net_) GTEST_SKIP() << "network namespaces cannot be made here: " << why;
    char templ[] = "/tmp/cohort-netns-XXXXXX";
    dir_ = ::mkdtemp(templ);
    endpoint_ = "tcp://" + net_->address("coord") + ":7070";
    keygen({dir_ + "/keys/coord"});
    for (const auto& n : kNodes)
      keygen({dir_ + "/keys/" + n, "--role", "agent", "--authorize", dir_ + "/keys/coord"});
    keygen({dir_ + "/keys/client", "--role", "client", "--authorize", dir_ + "/keys/coord"});
    start_coordinator();
    for (const auto& n : kNodes) start_agent(n);
    ASSERT_TRUE(wait_for_alive(3, 15s)) << logs();
  }

  void TearDown() override {
    agents_.clear();  // SIGKILL; the network's teardown ends what is left
    coordinator_.reset();
    net_.reset();
    if (!dir_.empty() && !std::getenv("COHORT_KEEP_TEST_DIRS")) fs::remove_all(dir_);
  }

  void keygen(const std::vector<std::string>& args) {
    std::vector<std::string> a = {"keygen"};
    a.insert(a.end(), args.begin(), args.end());
    auto r = run_cohort(a);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  std::vector<std::string> in(const std::string& host, std::vector<std::string> argv) {
    auto full = net_->in(host);
    full.push_back(cohort_binary());
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }
  void start_coordinator() {
    coordinator_ =
        Process::start(in("coord", {"coordinator", "--listen", endpoint_, "--keys",
                                    dir_ + "/keys/coord", "--state-dir", dir_ + "/state"}),
                       dir_ + "/coordinator-" + std::to_string(coordinator_starts_++) + ".log");
    ASSERT_TRUE(coordinator_);
  }
  // No --advertise-address: each agent finds its address on the route to the coordinator.
  void start_agent(const std::string& n) {
    agents_[n] = Process::start(in(n, {"agent", "--coordinator", endpoint_, "--name", n,
                                       "--cpu-slots", "1", "--keys", dir_ + "/keys/" + n}),
                                dir_ + "/agent-" + n + ".log");
    ASSERT_TRUE(agents_[n]);
  }
  CommandResult cli(const std::string& command, std::vector<std::string> args,
                    std::chrono::milliseconds timeout = 30s) {
    args.insert(args.begin(), command);
    args.insert(args.end(), {"--coordinator", endpoint_, "--keys", dir_ + "/keys/client"});
    return run_command(in("coord", args), timeout);
  }
  Json json_of(const std::string& command, std::vector<std::string> args) {
    args.push_back("--json");
    auto j = Json::parse(cli(command, args, 10s).out, nullptr, false);
    return j.is_discarded() ? Json() : j;
  }
  std::string node_state(const std::string& n) {
    for (const auto& node : json_of("nodes", {})) {
      if (node.value("name", "") == n) return node.value("state", "");
    }
    return "";
  }
  bool wait_for_alive(int count, std::chrono::milliseconds timeout) {
    return wait_until(
        [&] {
          int alive = 0;
          for (const auto& node : json_of("nodes", {})) alive += node.value("state", "") == "alive";
          return alive == count;
        },
        timeout);
  }
  std::string write_job(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name + ".toml";
    write_file(path, "[job]\nname = \"" + name + "\"\noutput_dir = \"" + dir_ + "/out-" + name +
                         "\"\n" + body);
    return path;
  }
  std::string submit(const std::string& job) {
    auto r = cli("submit", {job});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  // Workers in `host`'s namespace running attempt `attempt` of `job`.
  std::vector<pid_t> workers_of(const std::string& host, const std::string& job, int attempt) {
    std::vector<pid_t> out;
    for (pid_t pid : net_->pids(host)) {
      std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
      std::set<std::string> vars;
      for (size_t at = 0; at < env.size();) {
        size_t end = env.find('\0', at);
        vars.insert(env.substr(at, end - at));
        at = end == std::string::npos ? env.size() : end + 1;
      }
      if (vars.count("COHORT_JOB_ID=" + job) &&
          vars.count("COHORT_ATTEMPT=" + std::to_string(attempt)) && process_alive(pid)) {
        out.push_back(pid);
      }
    }
    return out;
  }
  std::string logs() {
    std::string out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".log")
        out += "--- " + e.path().filename().string() + "\n" + read_file(e.path());
    }
    return out;
  }

  std::unique_ptr<NetnsNetwork> net_;
  std::string dir_;
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  int coordinator_starts_ = 0;
};

TEST_F(NetworkCluster, NodesRegisterTheirOwnAddressesAndThreeTrainOverGloo) {
  for (const auto& node : json_of("nodes", {})) {
    EXPECT_EQ(node.value("address", ""), net_->address(node.value("name", ""))) << node.dump();
  }
  // Every rank's network: rank 0's node is MASTER_ADDR, each listens on its own.
  auto env =
      write_job("env",
                "kind = \"command\"\nnodes = 3\ngpus_per_node = 1\n[command]\nargv = [\"/bin/sh\", "
                "\"-c\", \"echo addr $RANK $MASTER_ADDR $COHORT_GLOO_HOSTNAME $GLOO_SOCKET_IFNAME "
                "$NCCL_SOCKET_IFNAME\"]\n");
  auto r = cli("submit", {env, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << logs();
  std::string id = r.out.substr(0, r.out.find('\n'));
  auto lines = cli("logs", {id}).out;
  for (int rank = 0; rank < 3; ++rank) {
    std::string want = "addr " + std::to_string(rank) + " " + net_->address("n1") + " " +
                       net_->address(kNodes[rank]) + " eth0 =eth0";
    EXPECT_NE(lines.find(want), std::string::npos) << want << "\n" << lines;
  }

  std::string worker = fs::path(cohort_binary()).parent_path() / "cohort-worker";
  if (!fs::exists(worker)) GTEST_SKIP() << "cohort-worker is not built in this tree";
  std::string corpus;
  for (int i = 0; i < 400; ++i)
    corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write_file(dir_ + "/corpus.txt", corpus);
  auto train =
      write_job("train",
                "kind = \"train\"\nnodes = 3\ngpus_per_node = 1\n[model]\npreset = \"tiny\"\n"
                "[parallel]\nstrategy = \"ddp\"\n[train]\ndata = \"" +
                    dir_ +
                    "/corpus.txt\"\n"
                    "steps = 4\nmicro_batch = 2\nglobal_batch = 6\nseq_len = 32\nlr = 3e-3\n"
                    "warmup_steps = 1\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\n"
                    "sample_tokens = 0\nprecision = \"fp32\"\n");
  r = cli("submit", {train, "--wait"}, 90s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << logs();
  EXPECT_NE(r.out.find("world 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 4/4"), std::string::npos) << r.out;
}

TEST_F(NetworkCluster, APartitionedNodeStopsItsWorkersTheJobShrinksAndGrowsBackWhenTheLinkHeals) {
  // Attempts 0 and 1 run until stopped; attempt 2 (grown back) finishes.
  auto job =
      write_job("elastic",
                "kind = \"command\"\nnodes = \"2:3\"\ngpus_per_node = 1\nmax_restarts = 1\n"
                "[command]\nargv = [\"/bin/sh\", \"-c\", \"if [ $COHORT_ATTEMPT -ge 2 ]; then "
                "sleep 1; exit 0; fi; while true; do sleep 0.1; done\"]\n");
  std::string id = submit(job);
  ASSERT_TRUE(wait_until([&] { return workers_of("n3", id, 0).size() > 0; }, 10s)) << logs();
  auto cut = std::chrono::steady_clock::now();
  ASSERT_EQ(net_->partition("n3"), "");

  ASSERT_TRUE(wait_until([&] { return node_state("n3") == "lost"; }, 10s)) << logs();
  auto noticed =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut);
  std::printf("the partition of n3 was noticed after %lld ms\n",
              static_cast<long long>(noticed.count()));
  EXPECT_LT(noticed, 3s);
  ASSERT_TRUE(wait_until(
      [&] {
        auto s = json_of("status", {id});
        return s["attempts"].size() == 2 && s["attempts"][1].value("state", "") == "running";
      },
      10s))
      << json_of("status", {id}).dump(2) << logs();
  EXPECT_EQ(json_of("status", {id})["attempts"][1].value("world_size", 0), 2);
  // Self-fencing: n3's agent stopped attempt 0 on its own, cut off as it is.
  EXPECT_TRUE(wait_until([&] { return workers_of("n3", id, 0).empty(); }, 1s))
      << "attempt 0 still runs on the partitioned node\n"
      << logs();
  EXPECT_NE(read_file(dir_ + "/agent-n3.log").find("self-fencing"), std::string::npos) << logs();

  ASSERT_EQ(net_->heal("n3"), "");
  ASSERT_TRUE(
      wait_until([&] { return json_of("status", {id}).value("state", "") == "succeeded"; }, 30s))
      << json_of("status", {id}).dump(2) << logs();
  auto s = json_of("status", {id});
  ASSERT_EQ(s["attempts"].size(), 3u) << s.dump(2);
  EXPECT_EQ(s["attempts"][2].value("world_size", 0), 3);
  EXPECT_FALSE(s["attempts"][2].value("counts_as_restart", true)) << s.dump(2);
  EXPECT_EQ(s.value("restarts_used", -1), 1) << s.dump(2);  // the shrink only
  bool reported = false;
  for (const auto& e : s["events"]) {
    reported =
        reported || e.value("text", "").find("node n3 stopped rank(s) 2 of attempt 0 itself") !=
                        std::string::npos;
  }
  EXPECT_TRUE(reported) << s.dump(2);
}

TEST_F(NetworkCluster, ACoordinatorRestartedAcrossTheNetworkGetsItsNodesAndJobsBack) {
  auto job = write_job("long",
                       "kind = \"command\"\nnodes = 3\ngpus_per_node = 1\n"
                       "[command]\nargv = [\"/bin/sh\", \"-c\", \"sleep 7; echo carried on\"]\n");
  std::string id = submit(job);
  ASSERT_TRUE(wait_until(
      [&] { return workers_of("n1", id, 0).size() > 0 && workers_of("n3", id, 0).size() > 0; },
      10s))
      << logs();
  coordinator_->signal(SIGKILL);
  coordinator_->wait(5s);
  std::this_thread::sleep_for(
      3s);  // down longer than heartbeat_timeout: the agents keep their workers
  start_coordinator();
  EXPECT_TRUE(wait_for_alive(3, 10s)) << logs();
  for (const auto& node : json_of("nodes", {})) {
    EXPECT_EQ(node.value("address", ""), net_->address(node.value("name", ""))) << node.dump();
  }
  ASSERT_TRUE(
      wait_until([&] { return json_of("status", {id}).value("state", "") == "succeeded"; }, 20s))
      << json_of("status", {id}).dump(2) << logs();
  EXPECT_EQ(json_of("status", {id})["attempts"].size(), 1u)
      << "the job carried on without a restart";
  for (const auto& n : kNodes) {
    EXPECT_EQ(read_file(dir_ + "/agent-" + n + ".log").find("self-fencing"), std::string::npos)
        << logs();
  }
  // And it takes new work.
  auto after = write_job(
      "after", "kind = \"command\"\nnodes = 3\ngpus_per_node = 1\n[command]\nargv = [\"true\"]\n");
  auto r = cli("submit", {after, "--wait"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << logs();
}

}  // namespace
}  // namespace cohort::testing
