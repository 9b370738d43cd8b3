// A coordinator in-process on its own loop thread, and fake agents and
// clients that speak the protocol over real loopback sockets, so tests can
// play the agents' part message by message.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "coordinator/coordinator.h"
#include "protocol/client.h"
#include "protocol/codec.h"
#include "protocol/job_control.h"
#include "protocol/security.h"
#include "tests/jobs/job_files.h"

namespace cohort::coordinator::testing {

using namespace std::chrono_literals;

class FakeAgent {
 public:
  // `security`: an agent key's view (protocol::load_client_security) for a
  // coordinator with CURVE; disabled: plain TCP.
  FakeAgent(const std::string& endpoint, std::string name, int gpus, bool do_register = true,
            const protocol::Security& security = {})
      : name_(std::move(name)), socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    if (security.enabled) {
      socket_.set(zmq::sockopt::curve_serverkey, security.server_public_key);
      socket_.set(zmq::sockopt::curve_publickey, security.own.public_key);
      socket_.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
    }
    socket_.connect(endpoint);
    for (int i = 0; i < gpus; ++i) gpus_.push_back({i, name_ + "-gpu" + std::to_string(i), "", "fake", 0});
    if (do_register) register_node();
  }
  const std::string& name() const { return name_; }

  void register_node(std::vector<protocol::RunningWorker> running = {}) {
    send(protocol::RegisterNode{name_, "10.0.0." + name_.substr(name_.size() - 1), gpus_, running}, 1);
    EXPECT_TRUE(next(protocol::RegisterAck::kType)) << name_ << " got no register_ack";
  }
  void heartbeat(std::vector<protocol::RunningWorker> running = {}) {
    send(protocol::Heartbeat{name_, std::move(running)});
  }
  template <typename T>
  void send(const T& message, uint64_t id = 0) {
    send_raw(protocol::encode(message, id));
  }
  void send_raw(const std::string& payload) { socket_.send(zmq::buffer(payload), zmq::send_flags::none); }
  void send_frames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                                 : zmq::send_flags::none);
    }
  }
  // The next message of `type`, skipping others; nullopt after `timeout`.
  std::optional<protocol::Envelope> next(const std::string& type,
                                         std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 50ms);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      if (!socket_.recv(m, zmq::recv_flags::dontwait)) continue;
      auto e = protocol::decode(std::string(static_cast<const char*>(m.data()), m.size()));
      if (e && e->type == protocol::LaunchOrder::kType) answer_port_request(*e);
      if (e && e->type == type) return *e;
    }
    return std::nullopt;
  }
  template <typename T>
  std::optional<T> next_as(std::chrono::milliseconds timeout = 5s) {
    auto e = next(T::kType, timeout);
    if (!e) return std::nullopt;
    auto m = protocol::body_as<T>(*e);
    if (!m) return std::nullopt;
    return *m;
  }
  // The port this agent reports when a launch order leaves MASTER_PORT to it
  // (node rank 0), as a real agent does once its workers run; 0: it stays silent.
  int master_port_to_report = 29611;

  // Reports every local rank of `order` as exited with `code`.
  void exit_all(const protocol::LaunchOrder& order, int code, bool stopped = false) {
    for (size_t l = 0; l < order.gpu_indices.size(); ++l) {
      exit_rank(order, order.node_rank * int(order.gpu_indices.size()) + int(l), code, stopped);
    }
  }
  void exit_rank(const protocol::LaunchOrder& order, int rank, int code, bool stopped = false) {
    protocol::WorkerExit e;
    e.job_id = order.job_id;
    e.attempt = order.attempt;
    e.node = name_;
    e.rank = rank;
    e.exit_code = code;
    e.stopped = stopped;
    if (code != 0) e.last_lines = {"boom from rank " + std::to_string(rank)};
    send(e);
  }

 private:
  void answer_port_request(const protocol::Envelope& e) {
    auto order = protocol::body_as<protocol::LaunchOrder>(e);
    if (!order || order->master_port != 0 || master_port_to_report == 0) return;
    send(protocol::WorkersStarted{order->job_id, order->attempt, name_, master_port_to_report});
  }

  std::string name_;
  std::vector<protocol::GpuDesc> gpus_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void TearDown() override { stop(); }

  void start(const std::string& state_dir = "", const std::string& http_token = "") {
    CoordinatorOptions options;
    options.listen = "tcp://127.0.0.1:0";
    options.clock = &clock_;
    options.heartbeat_timeout = 3s;
    options.tick_interval = 5ms;
    options.state_dir = state_dir;
    options.http_listen = "127.0.0.1:0";
    options.http_token = http_token;
    if (configure_) configure_(options);
    io_ = std::make_unique<boost::asio::io_context>();
    auto c = Coordinator::start(*io_, options);
    ASSERT_TRUE(c) << c.status().message();
    coordinator_ = std::move(*c);
    endpoint_ = coordinator_->endpoint();
    thread_ = std::thread([this] {
      auto guard = boost::asio::make_work_guard(*io_);
      io_->run();
    });
    auto client = protocol::Client::connect(endpoint_, {});
    ASSERT_TRUE(client);
    client_ = std::move(*client);
  }

  void stop() {
    if (!io_) return;
    io_->stop();
    thread_.join();
    coordinator_.reset();
    io_.reset();
  }

  std::string submit(const jobs::JobSpec& job) {
    auto r = client_->request<protocol::SubmitReply>(submit_of(job), 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r ? r->job_id : "";
  }
  // What `cohort submit` sends for the job: its resolved file.
  static protocol::SubmitJob submit_of(const jobs::JobSpec& job) { return {jobs::to_toml(job)}; }
  protocol::JobInfo job(const std::string& id) {
    auto r = client_->request<protocol::JobList>(protocol::JobQuery{id, 0, {}}, 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r && !r->jobs.empty() ? r->jobs.front() : protocol::JobInfo{};
  }
  bool wait_for_state(const std::string& id, const std::string& state,
                      std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (job(id).state == state) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  static jobs::JobSpec command_job(const std::string& name, int nodes, int gpus) {
    return jobs::testing::command_job(name, nodes, gpus);
  }
  static bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return condition();
  }
  std::optional<protocol::NodeInfo> node(const std::string& name) {
    auto r = client_->request<protocol::NodeList>(protocol::NodeQuery{}, 5s);
    if (r) {
      for (const auto& n : r->nodes) {
        if (n.name == name) return n;
      }
    }
    return std::nullopt;
  }
  // A heartbeat, and the wait until the coordinator has taken it (its age on
  // the manual clock is then 0), so the next clock advance cannot overtake it.
  void beat(FakeAgent& agent, std::vector<protocol::RunningWorker> running = {}) {
    agent.heartbeat(std::move(running));
    EXPECT_TRUE(wait_until([&] {
      auto n = node(agent.name());
      return n && n->state == "alive" && n->heartbeat_age_ms == 0;
    })) << agent.name() << "'s heartbeat was not taken";
  }

  // Store requests are taken only from a node of the attempt, with its token.
  static protocol::StoreRequest store_request(const protocol::LaunchOrder& order, const std::string& op,
                                              std::vector<std::string> keys) {
    protocol::StoreRequest r;
    r.job_id = order.job_id;
    r.attempt = order.attempt;
    r.op = op;
    r.keys = std::move(keys);
    r.token = order.store_token;
    return r;
  }

  std::function<void(CoordinatorOptions&)> configure_;  // set before start()
  ManualClock clock_;
  std::unique_ptr<boost::asio::io_context> io_;
  std::unique_ptr<Coordinator> coordinator_;
  std::thread thread_;
  std::string endpoint_;
  std::unique_ptr<protocol::Client> client_;
};

}  // namespace cohort::coordinator::testing
