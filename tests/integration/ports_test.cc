// Ports a job uses, with real processes: concurrent `cohort run`s on one
// machine each get a MASTER_PORT of their own (each is a separate
// coordinator, so only the agents' host-wide claims keep them apart).
#include <filesystem>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string worker_binary() { return fs::path(cohort_binary()).parent_path() / "cohort-worker"; }

// A 2-rank CPU training job started torchrun-style: the built-in worker with
// COHORT_STORE removed, so rank 0 serves the rendezvous store on MASTER_PORT
// itself, as torch's TCPStore does, for the whole run.
void write_torchrun_style_job(const std::string& dir, const std::string& name, const std::string& extra) {
  write_file(dir + "/" + name + "-train.toml",
             "[job]\nname = \"" + name + "-train\"\nkind = \"train\"\ngpus_per_node = 2\n"
             "output_dir = \"" + dir + "/" + name + "-train\"\n"
             "[model]\npreset = \"tiny\"\n"
             "[train]\ndata = \"/usr/share/games/fortunes/cookie\"\nsteps = 150\nmicro_batch = 2\n"
             "seq_len = 32\nlog_every = 50\nresume = false\n");
  write_file(dir + "/" + name + ".toml",
             "[job]\nname = \"" + name + "\"\nkind = \"command\"\ngpus_per_node = 2\n" + extra +
             "output_dir = \"" + dir + "/" + name + "\"\n"
             "[command]\nargv = [\"sh\", \"-c\", \"echo MASTER_PORT=$MASTER_PORT; exec env -u COHORT_STORE -u "
             "COHORT_STORE_TOKEN '" + worker_binary() + "' '" + dir + "/" + name + "-train.toml'\"]\n");
}

std::set<std::string> master_ports(const std::string& output) {
  std::set<std::string> out;
  std::regex re(R"(MASTER_PORT=(\d+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1]);
  return out;
}

TEST(Ports, TwoCohortRunsOfATrainingJobAtOnceBothSucceed) {
  if (!fs::exists(worker_binary())) GTEST_SKIP() << "cohort-worker is not built";
  if (!fs::exists("/usr/share/games/fortunes/cookie")) GTEST_SKIP() << "no fortunes text (scripts/setup.sh)";
  Cluster scratch;  // only for its temporary folder
  const std::string& dir = scratch.dir();
  write_torchrun_style_job(dir, "first", "");
  // The second names a one-port range: the port it gets is that one.
  write_torchrun_style_job(dir, "second", "port_range = \"31777-31777\"\n");
  auto first = Process::start({cohort_binary(), "run", dir + "/first.toml"}, dir + "/first.out");
  auto second = Process::start({cohort_binary(), "run", dir + "/second.toml"}, dir + "/second.out");
  ASSERT_TRUE(first && second);
  int a = first->wait(120s), b = second->wait(120s);
  EXPECT_EQ(a, 0) << first->output();
  EXPECT_EQ(b, 0) << second->output();
  auto pa = master_ports(first->output()), pb = master_ports(second->output());
  ASSERT_EQ(pa.size(), 1u) << first->output();
  ASSERT_EQ(pb.size(), 1u) << second->output();
  EXPECT_NE(*pa.begin(), *pb.begin());
  EXPECT_EQ(*pb.begin(), "31777");
  int port = std::stoi(*pa.begin());
  EXPECT_TRUE(port >= 29500 && port <= 30499) << port;
  EXPECT_NE(first->output().find("step 150/150"), std::string::npos) << first->output();
  EXPECT_NE(second->output().find("step 150/150"), std::string::npos) << second->output();
}

}  // namespace
}  // namespace cohort::testing
