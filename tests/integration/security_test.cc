// The security rule with real processes: off loopback the coordinator needs
// CURVE keys (or an explicit --insecure); with keys, only agents and clients
// holding an authorized key get in, each client key under its limits.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(Security, ANonLoopbackAddressWithoutKeysIsRefused) {
  std::string endpoint = "tcp://0.0.0.0:" + std::to_string(free_tcp_port());
  auto r = run_cohort({"coordinator", "--listen", endpoint}, 20s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("without CURVE keys"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cohort keygen"), std::string::npos) << r.err;
}

TEST(Security, InsecureStartsWithAWarning) {
  Cluster c;
  std::string endpoint = "tcp://0.0.0.0:" + std::to_string(free_tcp_port());
  auto p = Process::start({cohort_binary(), "coordinator", "--listen", endpoint, "--insecure"},
                          c.dir() + "/insecure.log");
  ASSERT_TRUE(p);
  EXPECT_TRUE(wait_until([&] { return p->output().find("WITHOUT authentication") != std::string::npos; }, 10s))
      << p->output();
  EXPECT_TRUE(p->running());
}

TEST(Security, WithKeysOnlyAuthorizedAgentsAndClientsGetIn) {
  Cluster c;
  std::string keys = c.dir() + "/keys", node = c.dir() + "/node", me = c.dir() + "/me";
  std::string other = c.dir() + "/other";
  ASSERT_EQ(run_cohort({"keygen", keys}).exit_code, 0);
  ASSERT_EQ(run_cohort({"keygen", node, "--role", "agent", "--authorize", keys}).exit_code, 0);
  ASSERT_EQ(run_cohort({"keygen", me, "--role", "client", "--authorize", keys}).exit_code, 0);
  ASSERT_EQ(run_cohort({"keygen", other}).exit_code, 0);
  ASSERT_EQ(run_cohort({"keygen", other + "/me", "--role", "client", "--authorize", other}).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(node + "/server.secret")) << "the server secret stays home";
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  auto coordinator = Process::start({cohort_binary(), "coordinator", "--listen", endpoint, "--keys", keys},
                                    c.dir() + "/coordinator.log");
  auto agent = Process::start({cohort_binary(), "agent", "--coordinator", endpoint, "--keys", node,
                               "--name", "secure-node", "--fake-gpus", "1"},
                              c.dir() + "/agent.log");
  auto intruder = Process::start({cohort_binary(), "agent", "--coordinator", endpoint, "--name",
                                  "intruder", "--fake-gpus", "1"},
                                 c.dir() + "/intruder.log");
  // A client key presented by an agent: role confusion, refused.
  std::string confused = c.dir() + "/confused";
  std::filesystem::create_directories(confused);
  std::filesystem::copy_file(me + "/client.public", confused + "/agent.public");
  std::filesystem::copy_file(me + "/client.secret", confused + "/agent.secret");
  std::filesystem::copy_file(keys + "/server.public", confused + "/server.public");
  auto impostor = Process::start({cohort_binary(), "agent", "--coordinator", endpoint, "--keys", confused,
                                  "--name", "impostor", "--fake-gpus", "1"},
                                 c.dir() + "/impostor.log");
  auto job = c.write_job("secure", "[job]\nname = \"secure\"\nkind = \"command\"\noutput_dir = \"" +
                                       c.dir() + "/out\"\n[command]\nargv = [\"echo\", \"inside\"]\n");
  auto r = run_cohort({"submit", job, "--wait", "--coordinator", endpoint, "--keys", me}, 30s);
  EXPECT_EQ(r.exit_code, 0) << r.err << coordinator->output();
  EXPECT_NE(r.out.find("[rank 0] inside"), std::string::npos) << r.out;
  auto nodes = run_cohort({"nodes", "--coordinator", endpoint, "--keys", me}, 30s);
  EXPECT_NE(nodes.out.find("secure-node"), std::string::npos);
  EXPECT_EQ(nodes.out.find("intruder"), std::string::npos) << nodes.out;
  EXPECT_EQ(nodes.out.find("impostor"), std::string::npos) << nodes.out;
  // An agent key cannot submit.
  std::string agent_as_client = c.dir() + "/agent-as-client";
  std::filesystem::create_directories(agent_as_client);
  std::filesystem::copy_file(node + "/agent.public", agent_as_client + "/client.public");
  std::filesystem::copy_file(node + "/agent.secret", agent_as_client + "/client.secret");
  std::filesystem::copy_file(keys + "/server.public", agent_as_client + "/server.public");
  auto refused = run_cohort({"submit", job, "--coordinator", endpoint, "--keys", agent_as_client}, 30s);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("needs a client key"), std::string::npos) << refused.err;
  // No keys, or keys of another coordinator: no answer (exit 3).
  EXPECT_EQ(run_cohort({"jobs", "--coordinator", endpoint}, 30s).exit_code, 3);
  EXPECT_EQ(run_cohort({"jobs", "--coordinator", endpoint, "--keys", other + "/me"}, 30s).exit_code, 3);
  // The right server key but a client key nobody authorized: said so plainly.
  std::string stranger = c.dir() + "/stranger";
  std::filesystem::create_directories(stranger);
  for (const char* f : {"client.public", "client.secret"}) {
    std::filesystem::copy_file(other + "/me/" + f, stranger + "/" + f);
  }
  std::filesystem::copy_file(keys + "/server.public", stranger + "/server.public");
  auto unknown = run_cohort({"jobs", "--coordinator", endpoint, "--keys", stranger}, 30s);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("refused this client's key"), std::string::npos) << unknown.err;
  EXPECT_TRUE(coordinator->running());
  EXPECT_NE(coordinator->output().find("not authorized"), std::string::npos) << coordinator->output();
  EXPECT_NE(impostor->output().find("needs an agent key"), std::string::npos) << impostor->output();
}

TEST(Security, EachClientKeyIsHeldToItsLimitsAndOwnsItsJobs) {
  Cluster c;
  std::string keys = c.dir() + "/keys", node = c.dir() + "/node", alice = c.dir() + "/alice";
  std::string bob = c.dir() + "/bob";
  ASSERT_EQ(run_cohort({"keygen", keys}).exit_code, 0);
  ASSERT_EQ(run_cohort({"keygen", node, "--role", "agent", "--authorize", keys}).exit_code, 0);
  // The operator names alice's key and gives it its own limits; bob's key
  // has the coordinator's defaults.
  auto made = run_cohort({"keygen", alice, "--role", "client", "--authorize", keys, "--name", "alice", "--max-gpus",
                          "1", "--max-queued", "1"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(run_cohort({"keygen", bob, "--role", "client", "--authorize", keys}).exit_code, 0);
  EXPECT_NE(read_file(keys + "/authorized_clients").find(" name=alice max_gpus=1 max_queued=1\n"), std::string::npos);
  auto misplaced = run_cohort({"keygen", c.dir() + "/x", "--role", "agent", "--authorize", keys, "--max-gpus", "2"});
  EXPECT_EQ(misplaced.exit_code, 2);
  EXPECT_NE(misplaced.err.find("describe a client key"), std::string::npos) << misplaced.err;
  auto bad = run_cohort({"keygen", c.dir() + "/y", "--role", "client", "--authorize", keys, "--max-queued", "many"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--max-queued must be a number from 0 to 1000000 or 'unlimited', not 'many'"),
            std::string::npos)
      << bad.err;
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  auto coordinator = Process::start({cohort_binary(), "coordinator", "--listen", endpoint, "--keys", keys,
                                     "--max-queued-per-key", "5"},
                                    c.dir() + "/coordinator.log");
  auto agent = Process::start({cohort_binary(), "agent", "--coordinator", endpoint, "--keys", node, "--name",
                               "node-a", "--fake-gpus", "2"},
                              c.dir() + "/agent.log");
  auto cohort = [&](std::vector<std::string> args, const std::string& key_dir) {
    args.insert(args.end(), {"--coordinator", endpoint, "--keys", key_dir});
    return run_cohort(args, 30s);
  };
  auto job_file = [&](const std::string& name) {
    return c.write_job(name, "[job]\nname = \"" + name + "\"\nkind = \"command\"\noutput_dir = \"" + c.dir() +
                                 "/" + name + "\"\n[command]\nargv = [\"sleep\", \"60\"]\n");
  };
  ASSERT_TRUE(wait_until([&] { return cohort({"nodes"}, alice).out.find("alive") != std::string::npos; }, 20s))
      << agent->output();
  auto first = cohort({"submit", job_file("a1")}, alice);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string running = first.out.substr(0, first.out.find('\n'));
  ASSERT_TRUE(wait_until([&] { return cohort({"status", running}, alice).out.find(": running") != std::string::npos; },
                         20s));
  // alice holds her one GPU: her second job waits, though a GPU is free.
  auto second = cohort({"submit", job_file("a2")}, alice);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  std::string waiting = second.out.substr(0, second.out.find('\n'));
  EXPECT_TRUE(wait_until([&] { return cohort({"status", waiting}, alice).out.find("GPU limit") != std::string::npos; },
                         20s));
  // Her queue is full (max_queued=1): refused, naming the key and the limit.
  auto third = cohort({"submit", job_file("a3")}, alice);
  EXPECT_NE(third.exit_code, 0);
  EXPECT_NE(third.err.find("client key alice has 1 job(s) waiting in the queue; its limit is 1"), std::string::npos)
      << third.err;
  // bob's job takes the free GPU; the job list says whose each job is.
  auto bobs = cohort({"submit", job_file("b1")}, bob);
  ASSERT_EQ(bobs.exit_code, 0) << bobs.err;
  std::string bob_job = bobs.out.substr(0, bobs.out.find('\n'));
  EXPECT_TRUE(wait_until([&] { return cohort({"status", bob_job}, bob).out.find(": running") != std::string::npos; },
                         20s));
  auto table = cohort({"jobs"}, bob);
  EXPECT_NE(table.out.find("OWNER"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" alice "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" " + read_file(bob + "/client.public").substr(0, 12) + " "), std::string::npos)
      << table.out;
  EXPECT_EQ(cohort({"cancel", running, waiting, bob_job}, alice).exit_code, 0);
  EXPECT_TRUE(coordinator->running());
}

}  // namespace
}  // namespace cohort::testing
