// The agent daemon against a coordinator the test plays by hand (a ZeroMQ
// ROUTER on an ipc:// endpoint), with a FakeProcessLauncher and a
// ManualClock: self-fencing when heartbeats go unanswered, the hold while the
// coordinator process is gone, and the report at the next registration. And
// with the real clock: what an agent says within 3 s when it cannot reach
// the coordinator or its key is refused.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "agent/agent.h"
#include "agent/fake_process_launcher.h"
#include "coordinator/coordinator.h"
#include "protocol/codec.h"
#include "tests/jobs/job_files.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Keeps the last log lines for the test to read.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200)) {
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const {
    std::string out;
    for (const auto& line : sink_->last_formatted()) out += line;
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The coordinator's side of the wire, played message by message.
class ScriptedCoordinator {
 public:
  explicit ScriptedCoordinator(const std::string& endpoint)
      : socket_(context_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(endpoint);
  }
  struct Received {
    std::string peer;
    protocol::Envelope envelope;
  };
  // The next message of `type` (others are skipped), pumping the agent's loop.
  std::optional<Received> next(boost::asio::io_context& io, const std::string& type,
                               std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      io.run_for(10ms);
      std::vector<zmq::message_t> frames;
      while (zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        if (frames.size() == 2) {
          auto e = protocol::decode(frames[1].to_string());
          if (e && e->type == type) return Received{frames[0].to_string(), *e};
        }
        frames.clear();
      }
    }
    return std::nullopt;
  }
  template <typename T>
  void send(const std::string& peer, const T& message, uint64_t id = 0) {
    std::string payload = protocol::encode(message, id);
    socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(payload), zmq::send_flags::none);
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

class AgentDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-agentd-XXXXXX";
    dir_ = ::mkdtemp(templ);
    endpoint_ = "ipc://" + dir_ + "/coordinator.sock";
    launcher_->set_exit_on_stop(true);
  }
  void TearDown() override {
    agent_.reset();
    fs::remove_all(dir_);
  }
  void start_agent() {
    AgentOptions o;
    o.coordinator = endpoint_;
    o.name = "node-a";
    o.prober = make_fake_prober(1);
    o.launcher = launcher_;
    o.clock = &clock_;
    auto a = Agent::start(io_, o);
    ASSERT_TRUE(a) << a.status().message();
    agent_ = std::move(*a);
  }
  // Registration answered with the default lease terms; returns the agent's peer id.
  std::string registered(ScriptedCoordinator& c) {
    auto reg = c.next(io_, protocol::RegisterNode::kType);
    EXPECT_TRUE(reg);
    if (!reg) return "";
    c.send(reg->peer, protocol::RegisterAck{500, 2500, 5000}, reg->envelope.id);
    return reg->peer;
  }
  protocol::LaunchOrder order(int attempt) {
    protocol::LaunchOrder o;
    o.job_id = "job-1";
    o.attempt = attempt;
    o.gpu_indices = {0};
    o.master_addr = "10.0.0.1";
    o.master_port = 29500;
    jobs::JobSpec job = jobs::testing::command_job("t", 1, 1);
    job.job.output_dir = dir_ + "/out";
    job.job.working_dir = dir_;
    job.command.argv = {"sleep", "300"};
    o.job_toml = jobs::to_toml(job);
    return o;
  }
  bool pump_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_for(10ms);
    }
    return true;
  }

  std::string dir_;
  std::string endpoint_;
  boost::asio::io_context io_;
  ManualClock clock_;
  std::shared_ptr<FakeProcessLauncher> launcher_ = std::make_shared<FakeProcessLauncher>();
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentDaemonTest,
       UnansweredHeartbeatsStopTheWorkersWhenTheLeaseEndsAndTheNextRegistrationSaysSo) {
  LogCapture log;
  ScriptedCoordinator c(endpoint_);
  start_agent();
  std::string peer = registered(c);
  c.send(peer, order(0));
  ASSERT_TRUE(pump_until([&] { return launcher_->spawn_count() == 1; }));
  auto beat = c.next(io_, protocol::Heartbeat::kType);
  ASSERT_TRUE(beat);
  c.send(peer, protocol::Ack{}, beat->envelope.id);      // the lease runs from this heartbeat
  ASSERT_TRUE(c.next(io_, protocol::Heartbeat::kType));  // unanswered from here on

  clock_.advance(2400ms);  // within the 2.5 s lease: the worker runs on
  io_.run_for(300ms);
  EXPECT_TRUE(launcher_->record(0).stops.empty());
  clock_.advance(200ms);
  auto exit = c.next(io_, protocol::WorkerExit::kType);
  ASSERT_TRUE(exit) << log.text();
  EXPECT_EQ(launcher_->record(0).stops.size(), 1u);  // SIGTERM, SIGKILL after the grace
  auto m = protocol::body_as<protocol::WorkerExit>(exit->envelope);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->stopped);  // a failure with its reason, not a stop on order
  EXPECT_NE(m->failure.find("self-fencing"), std::string::npos) << m->failure;
  EXPECT_NE(m->failure.find("heartbeat_timeout"), std::string::npos) << m->failure;
  EXPECT_NE(log.text().find("stopping 1 worker(s)"), std::string::npos) << log.text();

  // An order from before the cut-off is not carried out.
  c.send(peer, order(1));
  io_.run_for(200ms);
  EXPECT_EQ(launcher_->spawn_count(), 1u);

  // Contact again: the coordinator had declared the node lost.
  beat = c.next(io_, protocol::Heartbeat::kType);
  ASSERT_TRUE(beat);
  c.send(peer, protocol::ErrorReply{"unknown_node", "node node-a must register again"},
         beat->envelope.id);
  auto again = c.next(io_, protocol::RegisterNode::kType);
  ASSERT_TRUE(again);
  auto reg = protocol::body_as<protocol::RegisterNode>(again->envelope);
  ASSERT_TRUE(reg);
  ASSERT_EQ(reg->fenced.size(), 1u);
  EXPECT_EQ(reg->fenced[0].job_id, "job-1");
  EXPECT_EQ(reg->fenced[0].attempt, 0);
  EXPECT_NE(reg->fence_reason.find("self-fencing"), std::string::npos);
  EXPECT_TRUE(reg->running.empty());
  c.send(peer, protocol::RegisterAck{500, 2500, 5000}, again->envelope.id);
  c.send(peer, order(2));
  EXPECT_TRUE(pump_until([&] { return launcher_->spawn_count() == 2; })) << log.text();
}

TEST_F(AgentDaemonTest, ACoordinatorProcessThatWentAwayHoldsTheLeaseForItsRecoveryGrace) {
  LogCapture log;
  auto c = std::make_unique<ScriptedCoordinator>(endpoint_);
  start_agent();
  std::string peer = registered(*c);
  c->send(peer, order(0));
  ASSERT_TRUE(pump_until([&] { return launcher_->spawn_count() == 1; }));
  auto beat = c->next(io_, protocol::Heartbeat::kType);
  ASSERT_TRUE(beat);
  c->send(peer, protocol::Ack{}, beat->envelope.id);
  io_.run_for(100ms);
  c.reset();  // killed: its socket closes, its ipc file goes
  io_.run_for(300ms);
  clock_.advance(4s);  // past the 2.5 s heartbeat_timeout, within the 5 s recovery grace
  io_.run_for(500ms);
  EXPECT_TRUE(launcher_->record(0).stops.empty()) << log.text();
  EXPECT_NE(log.text().find("nothing listens at " + endpoint_), std::string::npos) << log.text();

  // Back, but answering nothing (a hung coordinator): the lease ends.
  ScriptedCoordinator silent(endpoint_);
  io_.run_for(1500ms);  // reconnected: its port accepts, so nothing extends the lease now
  clock_.advance(5100ms);
  EXPECT_TRUE(pump_until([&] { return !launcher_->record(0).stops.empty(); })) << log.text();
}

int unused_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(AgentContact, AnAgentThatCannotReachTheCoordinatorSaysWhyWithinThreeSeconds) {
  LogCapture log;
  boost::asio::io_context io;
  AgentOptions o;
  o.coordinator = "tcp://127.0.0.1:" + std::to_string(unused_tcp_port());
  o.name = "node-b";
  o.prober = make_fake_prober(1);
  o.launcher = std::make_shared<FakeProcessLauncher>();
  auto agent = Agent::start(io, o);
  ASSERT_TRUE(agent) << agent.status().message();
  io.run_for(3s);
  EXPECT_NE(log.text().find("no answer from the coordinator"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("nothing listens at " + o.coordinator), std::string::npos)
      << log.text();
}

TEST(AgentContact, AnAgentWhoseKeyTheCoordinatorRefusesSaysSoWithinThreeSeconds) {
  LogCapture log;
  char templ[] = "/tmp/cohort-agentkey-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  ASSERT_TRUE(protocol::write_coordinator_keys(dir + "/coord"));
  ASSERT_TRUE(protocol::write_peer_keys(dir + "/agent", protocol::Role::kAgent, dir + "/coord"));
  std::ofstream(dir + "/coord/authorized_agents", std::ios::trunc);  // revoked before the start,
  ASSERT_TRUE(protocol::write_peer_keys(dir + "/other", protocol::Role::kAgent,
                                        dir + "/coord"));  // another kept
  auto server = protocol::load_server_security(dir + "/coord");
  ASSERT_TRUE(server) << server.status().message();

  boost::asio::io_context coordinator_io;
  coordinator::CoordinatorOptions co;
  co.listen = "tcp://127.0.0.1:0";
  co.security = *server;
  auto coord = coordinator::Coordinator::start(coordinator_io, co);
  ASSERT_TRUE(coord) << coord.status().message();
  std::thread loop([&] {
    auto guard = boost::asio::make_work_guard(coordinator_io);
    coordinator_io.run();
  });

  boost::asio::io_context io;
  AgentOptions o;
  o.coordinator = (*coord)->endpoint();
  o.name = "node-c";
  o.prober = make_fake_prober(1);
  o.launcher = std::make_shared<FakeProcessLauncher>();
  auto security = protocol::load_client_security(dir + "/agent", protocol::Role::kAgent);
  ASSERT_TRUE(security) << security.status().message();
  o.security = *security;
  auto agent = Agent::start(io, o);
  ASSERT_TRUE(agent) << agent.status().message();
  io.run_for(3s);
  agent->reset();
  coordinator_io.stop();
  loop.join();
  coord->reset();
  fs::remove_all(dir);
  EXPECT_NE(log.text().find("no answer from the coordinator"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("refused this key"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

// A fake GPU whose prober finds it unhealthy (as NVML reports an Xid event).
class FaultyProber final : public GpuProber {
 public:
  Result<std::vector<GpuInfo>> probe() override { return inner_->probe(); }
  std::vector<GpuUsage> sample() override { return inner_->sample(); }
  std::vector<GpuFault> health() override { return {{1, "Xid 79 (GPU has fallen off the bus)"}}; }

 private:
  std::unique_ptr<GpuProber> inner_ = make_fake_prober(2);
};

TEST_F(AgentDaemonTest, AnUnhealthyGpuIsReportedWithItsReason) {
  ScriptedCoordinator c(endpoint_);
  AgentOptions o;
  o.coordinator = endpoint_;
  o.name = "node-a";
  o.prober = std::make_shared<FaultyProber>();
  o.launcher = launcher_;
  o.clock = &clock_;
  auto a = Agent::start(io_, o);
  ASSERT_TRUE(a) << a.status().message();
  agent_ = std::move(*a);
  registered(c);
  clock_.advance(3s);  // GPU figures go out every 2 s
  auto report = c.next(io_, protocol::GpuReport::kType);
  ASSERT_TRUE(report);
  auto m = protocol::body_as<protocol::GpuReport>(report->envelope);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->samples.size(), 2u);
  EXPECT_EQ(m->samples[0].fault, "");
  EXPECT_EQ(m->samples[1].fault, "Xid 79 (GPU has fallen off the bus)");
}

}  // namespace
}  // namespace cohort::agent
