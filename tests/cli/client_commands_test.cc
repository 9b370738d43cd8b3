// The client commands against a real coordinator and agent (processes over
// ipc://): cancel of several jobs, jobs --state/--limit/-q, status with
// elapsed time, GPU-hours and live training progress, --json documents,
// global flags on either side of the subcommand, bare HOST:PORT addresses.
#include <filesystem>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class CliCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.start_coordinator();
    c_.add_agent("node-a", 4, extra_agent_flags_);
    ASSERT_TRUE(c_.wait_for_alive_nodes(1, 10s));
  }
  std::string submit(const std::string& name, const std::string& script, int gpus = 1) {
    auto r = c_.cli("submit", {c_.write_job(name, command_job(c_, name, gpus, script))});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return submitted_id(r);
  }
  bool wait_state(const std::string& id, const std::string& state,
                  std::chrono::milliseconds t = 20s) {
    return wait_until([&] { return c_.job_state(id) == state; }, t);
  }
  Cluster c_;
  std::vector<std::string> extra_agent_flags_;
};

TEST_F(CliCluster, CancelTakesSeveralJobsAndReportsEachOne) {
  const std::string a = submit("a", "sleep 60"), b = submit("b", "sleep 60");
  ASSERT_TRUE(wait_state(a, "running") && wait_state(b, "running"));
  auto r = c_.cli("cancel", {a, b, "job-999"});
  EXPECT_EQ(r.exit_code, 2) << "an unknown job is a usage error";
  EXPECT_NE(r.out.find("cancelling " + a), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cancelling " + b), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no job 'job-999'"), std::string::npos) << r.err;
  EXPECT_TRUE(wait_state(a, "cancelled"));
  EXPECT_TRUE(wait_state(b, "cancelled"));

  auto again = c_.cli("cancel", {a, "--json"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  auto j = json_of(again);
  ASSERT_TRUE(j.is_array() && j.size() == 1) << again.out;
  EXPECT_EQ(j[0]["job"], a);
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[0]["message"], "job " + a + " already cancelled");
  auto mixed = json_of(c_.cli("cancel", {"--json", "job-999", b}));
  ASSERT_TRUE(mixed.is_array() && mixed.size() == 2) << mixed;
  EXPECT_EQ(mixed[0]["ok"], false);
  EXPECT_EQ(mixed[0]["message"], "no job 'job-999'");
  EXPECT_EQ(mixed[1]["ok"], true);
}

TEST_F(CliCluster, JobsSelectsByStateAndLimitAndQuietPrintsOnlyIds) {
  std::vector<std::string> done;
  for (const char* name : {"one", "two", "three"}) {
    done.push_back(submit(name, "true"));
    ASSERT_TRUE(wait_state(done.back(), "succeeded"));
  }
  const std::string running = submit("long", "sleep 60");
  ASSERT_TRUE(wait_state(running, "running"));

  auto r = json_of(c_.cli("jobs", {"--state", "running", "--json"}));
  ASSERT_TRUE(r.is_array() && r.size() == 1) << r;
  EXPECT_EQ(r[0]["id"], running);
  auto q = c_.cli("jobs", {"--state", "succeeded", "-q"});
  EXPECT_EQ(q.exit_code, 0);
  EXPECT_EQ(q.out, done[0] + "\n" + done[1] + "\n" + done[2] + "\n");
  auto newest = json_of(c_.cli("jobs", {"--limit", "2", "--json"}));
  ASSERT_TRUE(newest.is_array() && newest.size() == 2) << newest;
  EXPECT_EQ(newest[0]["id"], done[2]);
  EXPECT_EQ(newest[1]["id"], running);
  auto limited = c_.cli("jobs", {"--limit", "1"});
  EXPECT_NE(limited.err.find("(1 of 4 jobs shown"), std::string::npos) << limited.err;
  EXPECT_EQ(c_.cli("jobs", {"--state", "runing"}).exit_code, 2);
  c_.cli("cancel", {running});
}

TEST_F(CliCluster, StatusShowsElapsedTimeAndGpuHoursOfTheAttempts) {
  const std::string id = submit("two-ranks", "sleep 1.5", 2);
  ASSERT_TRUE(wait_state(id, "succeeded"));
  auto j = json_of(c_.cli("status", {id, "--json"}));
  ASSERT_TRUE(j.is_object()) << j;
  const int64_t elapsed = j["elapsed_ms"];
  EXPECT_GE(elapsed, 1400);
  EXPECT_LT(elapsed, 30000);
  // Two ranks for the one attempt's wall time, which is the job's.
  EXPECT_NEAR(j["gpu_hours"].get<double>(), 2.0 * double(elapsed) / 3.6e6, 2.0 * 200 / 3.6e6);
  EXPECT_FALSE(j["has_progress"].get<bool>()) << "a command job reports no training progress";
  auto text = c_.cli("status", {id});
  EXPECT_TRUE(std::regex_search(text.out, std::regex("elapsed [0-9]+s, 0\\.00 GPU-hours")))
      << text.out;
  auto table = c_.cli("jobs", {});
  EXPECT_NE(table.out.find("ELAPSED"), std::string::npos) << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex(id + " .* [0-9]+s "))) << table.out;
}

TEST_F(CliCluster, SubmitJsonPrintsTheIdAndWithWaitTheFinalRecordWhileLogsGoToStderr) {
  const std::string file =
      c_.write_job("hello", command_job(c_, "hello", 1, "echo hello from the job"));
  auto r = c_.cli("submit", {file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json_of(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.size(), 1u);
  EXPECT_EQ(j["job_id"].get<std::string>().rfind("job-", 0), 0u);
  // One job per output folder: the same file again once the first has ended.
  ASSERT_TRUE(wait_until([&] { return c_.job_state(j["job_id"]) == "succeeded"; }, 20s));

  auto waited = c_.cli("submit", {"--json", file, "--wait"});
  ASSERT_EQ(waited.exit_code, 0) << waited.err;
  auto w = json_of(waited);
  ASSERT_TRUE(w.is_object()) << "stdout must be one document:\n" << waited.out;
  EXPECT_EQ(w["job"]["id"], w["job_id"]);
  EXPECT_EQ(w["job"]["state"], "succeeded");
  EXPECT_NE(waited.err.find("[rank 0] hello from the job"), std::string::npos) << waited.err;
}

TEST_F(CliCluster, GlobalFlagsWorkBeforeOrAfterTheSubcommand) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--coordinator", c_.endpoint(), "jobs", "--json"},
           {"jobs", "--json", "--coordinator", c_.endpoint(), "--log-level", "warn"},
           {"--json", "--log-level", "error", "nodes", "--coordinator", c_.endpoint()},
           {"--json", "status", "--coordinator", c_.endpoint()}}) {
    auto r = run_cohort(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_TRUE(json_of(r).is_array()) << r.out;
  }
  auto nodes = run_cohort({"nodes", "-q", "--coordinator", c_.endpoint()});
  EXPECT_EQ(nodes.out, "node-a\n");
  auto bad = run_cohort({"jobs", "--coordinator", c_.endpoint(), "--log-level", "loud"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown log level 'loud'"), std::string::npos) << bad.err;
  auto env = run_program({cohort_binary(), "jobs", "-q"}, {{"COHORT_COORDINATOR", c_.endpoint()}});
  EXPECT_EQ(env.exit_code, 0) << env.err;
}

// A fake cohort-worker for a train job: rank 0 writes metrics.jsonl rows and
// its progress file as the trainer does (train/train_report.cc), then waits.
std::string fake_trainer(const Cluster& c, const std::string& output_dir) {
  const std::string path = c.dir() + "/fake-trainer.sh";
  write_file(path,
             "#!/bin/sh\n"
             "[ \"$RANK\" = 0 ] || exec sleep 60\n"
             "mkdir -p " +
                 output_dir +
                 "\n"
                 "for s in 1 2 3; do echo \"{\\\"step\\\": $s, \\\"loss\\\": 3.5, "
                 "\\\"tokens_per_s\\\": 1234.0}\" >> " +
                 output_dir +
                 "/metrics.jsonl; done\n"
                 "echo '{\"step\": 3, \"total_steps\": 10, \"eta_s\": 70, \"loss\": 3.5}' > "
                 "\"$COHORT_PROGRESS_FILE\"\n"
                 "exec sleep 60\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

TEST(CliStatusProgress, ARunningTrainJobShowsStepLossTokensPerSecondAndEta) {
  Cluster c;
  const std::string out = c.dir() + "/train-out";
  c.start_coordinator();
  c.add_agent("node-a", 2, {"--worker-binary", fake_trainer(c, out)});
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  write_file(c.dir() + "/corpus.txt", "the data the fake trainer never reads\n");
  auto job =
      c.write_job("train",
                  "[job]\nname = \"train\"\nkind = \"train\"\ngpus_per_node = 2\nstop_grace = 2.0\n"
                  "output_dir = \"" +
                      out + "\"\n[model]\npreset = \"tiny\"\n[train]\ndata = \"" + c.dir() +
                      "/corpus.txt\"\nsteps = 10\n");
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = submitted_id(r);
  json j;
  ASSERT_TRUE(wait_until(
      [&] {
        j = json_of(c.cli("status", {id, "--json"}));
        return j.is_object() && j.value("has_progress", false);
      },
      20s))
      << j;
  const auto& p = j["progress"];
  EXPECT_EQ(p["step"], 3);
  EXPECT_EQ(p["total_steps"], 10);
  EXPECT_DOUBLE_EQ(p["loss"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(p["tokens_per_s"].get<double>(), 1234.0);
  EXPECT_GT(p["eta_s"].get<double>(), 0);
  EXPECT_LE(p["eta_s"].get<double>(), 70);
  auto text = c.cli("status", {id});
  EXPECT_TRUE(
      std::regex_search(text.out, std::regex("progress: step 3/10 \\(30%\\), loss 3\\.5000, 1234 "
                                             "tok/s, ETA [0-9m]+s \\([0-9]+s ago\\)")))
      << text.out;
  c.cli("cancel", {id});
}

TEST(CliAddresses, ABareHostAndPortReachesATcpCoordinator) {
  Cluster c;  // for its folder
  auto coordinator = Process::start({cohort_binary(), "coordinator", "--listen", "127.0.0.1:0"},
                                    c.dir() + "/tcp.log");
  ASSERT_TRUE(coordinator);
  std::smatch m;
  const std::regex listening("listening on tcp://(127\\.0\\.0\\.1:[0-9]+)");
  std::string log;
  ASSERT_TRUE(wait_until(
      [&] {
        log = coordinator->output();
        return std::regex_search(log, m, listening);
      },
      10s))
      << log;
  const std::string address = m[1];
  auto r = run_cohort({"jobs", "--json", "--coordinator", address});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(json_of(r).is_array()) << r.out;
  auto no_port = run_cohort({"jobs", "--coordinator", "127.0.0.1"});
  EXPECT_EQ(no_port.exit_code, 2);
  EXPECT_NE(no_port.err.find("has no port; write tcp://HOST:PORT"), std::string::npos)
      << no_port.err;
}

}  // namespace
}  // namespace cohort::testing
