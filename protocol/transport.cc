// ROUTER/DEALER endpoints watched through ZMQ_FD, and the CURVE ZAP handler.
//
// ZMQ_FD is edge-triggered and only says "look at ZMQ_EVENTS": after every
// wake-up, and after every send (a send can consume the edge), the socket is
// drained until ZMQ_EVENTS has no POLLIN.
#include "protocol/transport.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/codec.h"
#include "protocol/input_log.h"

namespace cohort::protocol {
namespace {

namespace asio = boost::asio;

// Watches one socket's ZMQ_FD; calls `on_readable` until the socket is empty.
class SocketWatcher {
 public:
  SocketWatcher(asio::io_context& io, zmq::socket_t& socket, std::function<bool()> receive_one)
      : io_(io), socket_(socket), fd_(io, socket.get(zmq::sockopt::fd)),
        receive_one_(std::move(receive_one)) {}

  ~SocketWatcher() {
    *alive_ = false;
    boost::system::error_code ec;
    fd_.cancel(ec);
    fd_.release();  // the descriptor belongs to ZeroMQ
  }

  void start() {
    arm();
    schedule_drain();
  }

  // After a send, ZeroMQ may have consumed the edge: look again soon.
  void schedule_drain() {
    asio::post(io_, [this, alive = alive_] {
      if (*alive) drain();
    });
  }

 private:
  void arm() {
    fd_.async_wait(asio::posix::stream_descriptor::wait_read,
                   [this, alive = alive_](const boost::system::error_code& ec) {
                     if (ec || !*alive) return;
                     drain();
                     if (*alive) arm();
                   });
  }

  void drain() {
    auto alive = alive_;
    for (int budget = 0; *alive && budget < 10000; ++budget) {
      int events = socket_.get(zmq::sockopt::events);
      if (!(events & ZMQ_POLLIN)) return;
      if (!receive_one_()) return;
    }
    // A flood: yield to timers and other sockets, then carry on.
    if (*alive) schedule_drain();
  }

  asio::io_context& io_;
  zmq::socket_t& socket_;
  asio::posix::stream_descriptor fd_;
  std::function<bool()> receive_one_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Queues per peer are bounded in messages (ZeroMQ counts no bytes): a peer
// that never reads gets its replies dropped once kSendQueue are waiting,
// instead of the daemon buffering them (3,000 unanswered queries had taken
// 170 MB at a high-water mark of 100,000).
constexpr int kSendQueue = 64;
constexpr int kReceiveQueue = 1000;
// What the coordinator buffers from one peer before reading it: 16 messages
// of at most the cap + 1 MiB, so a flooding connection holds ~150 MB at
// worst, not rcvhwm × 32 MiB (a flood of 8 MB messages had peaked at 316 MB).
constexpr int kRouterReceiveQueue = 16;

void apply_common_options(zmq::socket_t& s, int receive_queue = kReceiveQueue) {
  s.set(zmq::sockopt::linger, 200);
  s.set(zmq::sockopt::sndhwm, kSendQueue);
  s.set(zmq::sockopt::rcvhwm, receive_queue);
  // A frame beyond the cap + 1 MiB drops the connection before it is
  // buffered; frames just over the cap get an error reply from the decoder.
  s.set(zmq::sockopt::maxmsgsize, int64_t(kMaxMessageBytes + (1 << 20)));
}

// Answers ZeroMQ's authentication requests (ZAP, RFC 27) for CURVE servers.
class ZapHandler {
 public:
  ZapHandler(asio::io_context& io, zmq::context_t& context, std::map<std::string, Role> keys)
      : socket_(context, zmq::socket_type::rep), authorized_(std::move(keys)) {
    socket_.bind("inproc://zeromq.zap.01");
    watcher_ = std::make_unique<SocketWatcher>(io, socket_, [this] { return answer_one(); });
    watcher_->start();
  }

 private:
  bool answer_one() {
    std::vector<zmq::message_t> frames;
    auto got = zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait);
    if (!got) return false;
    // REP must answer every request, even a malformed one.
    std::string request_id = frames.size() > 1 ? frames[1].to_string() : "";
    std::string mechanism = frames.size() > 5 ? frames[5].to_string() : "";
    std::string address = frames.size() > 3 ? frames[3].to_string() : "?";
    bool ok = false;
    std::string key_text;
    std::string role;
    if (mechanism == "CURVE" && frames.size() >= 7 && frames[6].size() == 32) {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(frames[6].data()), 32);
      key_text = z85;
      auto it = authorized_.find(key_text);
      ok = it != authorized_.end();
      if (ok) role = to_string(it->second);
    }
    if (!ok) warn_bad_input("refused a connection from " + address + ": public key " +
                            (key_text.empty() ? "(none)" : key_text) + " is not authorized");
    // The user id travels with every message of the connection ("User-Id"):
    // that is how the coordinator knows an agent from a client, and which
    // key an agent holds (node names are bound to agent keys).
    std::array<std::string, 6> reply = {"1.0", request_id, ok ? "200" : "400",
                                        ok ? "OK" : "unauthorized key", ok ? role + ":" + key_text : "", ""};
    for (size_t i = 0; i < reply.size(); ++i) {
      socket_.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore
                                                               : zmq::send_flags::none);
    }
    watcher_->schedule_drain();
    return true;
  }

  zmq::socket_t socket_;
  std::map<std::string, Role> authorized_;
  std::unique_ptr<SocketWatcher> watcher_;
};

class ZmqRouter final : public RouterEndpoint {
 public:
  ZmqRouter(std::shared_ptr<zmq::context_t> context, Handler handler)
      : context_(std::move(context)), socket_(*context_, zmq::socket_type::router),
        handler_(std::move(handler)) {}

  Status open(asio::io_context& io, const std::string& endpoint, const Security& security) {
    try {
      if (security.enabled) {
        secure_ = true;
        zap_ = std::make_unique<ZapHandler>(io, *context_, security.authorized_keys);
        socket_.set(zmq::sockopt::curve_server, 1);
        socket_.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
        socket_.set(zmq::sockopt::zap_domain, "cohort");
      }
      apply_common_options(socket_, kRouterReceiveQueue);
      socket_.set(zmq::sockopt::router_mandatory, 1);
      socket_.bind(endpoint);
      endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return unavailable("cannot listen on " + endpoint + ": " + e.what());
    }
    watcher_ = std::make_unique<SocketWatcher>(io, socket_, [this] { return receive_one(); });
    watcher_->start();
    return Status::ok();
  }

  Status send(const std::string& peer, const std::string& payload) override {
    try {
      socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      auto sent = socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      watcher_->schedule_drain();
      if (!sent) return unavailable("peer's queue is full; message dropped");
    } catch (const zmq::error_t& e) {
      watcher_->schedule_drain();
      return unavailable(std::string("cannot send to peer: ") + e.what());
    }
    return Status::ok();
  }

  std::string endpoint() const override { return endpoint_; }
  const std::string& current_key() const override { return current_key_; }

 private:
  bool receive_one() {
    std::vector<zmq::message_t> frames;
    std::optional<size_t> got;
    try {
      got = zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("receive failed: {}", e.what());
      return false;
    }
    if (!got) return false;
    if (frames.size() != 2) {
      // Identity plus exactly one payload frame; anything else is answered.
      warn_bad_input("dropped a message of " + std::to_string(frames.size() - 1) +
                     " frames (expected 1 payload frame)");
      if (!frames.empty()) {
        (void)send(frames[0].to_string(),
                   encode_error(invalid_argument("expected exactly one frame per message"), 0));
      }
      return true;
    }
    Role role = Role::kTrusted;
    if (secure_) {
      // Set by the ZAP handler for this connection; absent means refused.
      const char* user = zmq_msg_gets(frames[1].handle(), "User-Id");
      std::string text = user ? user : "";
      auto colon = text.find(':');
      std::string role_text = text.substr(0, colon);
      if (role_text == "agent") role = Role::kAgent;
      else if (role_text == "client") role = Role::kClient;
      else return true;
      current_key_ = colon == std::string::npos ? "" : text.substr(colon + 1);
    }
    handler_(frames[0].to_string(), frames[1].to_string(), role);
    return true;
  }

  std::shared_ptr<zmq::context_t> context_;
  zmq::socket_t socket_;
  Handler handler_;
  std::string endpoint_;
  bool secure_ = false;
  std::string current_key_;  // of the message being handled
  std::unique_ptr<ZapHandler> zap_;
  std::unique_ptr<SocketWatcher> watcher_;
};

class ZmqDealer final : public DealerEndpoint {
 public:
  ZmqDealer(std::shared_ptr<zmq::context_t> context, Handler handler)
      : context_(std::move(context)), socket_(*context_, zmq::socket_type::dealer),
        handler_(std::move(handler)) {}

  Status open(asio::io_context& io, const std::string& endpoint, const Security& security) {
    try {
      if (security.enabled) {
        socket_.set(zmq::sockopt::curve_serverkey, security.server_public_key);
        socket_.set(zmq::sockopt::curve_publickey, security.own.public_key);
        socket_.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
      }
      apply_common_options(socket_);
      socket_.set(zmq::sockopt::reconnect_ivl, 100);
      socket_.set(zmq::sockopt::reconnect_ivl_max, 1000);
      // A refused key shows only as a monitor event: watch for it so the
      // agent can say so instead of "queue is full".
      std::string monitor = "inproc://cohort-dealer-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
      zmq_socket_monitor(socket_.handle(), monitor.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
      monitor_.connect(monitor);
      endpoint_ = endpoint;
      socket_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      return unavailable("cannot connect to " + endpoint + ": " + e.what());
    }
    watcher_ = std::make_unique<SocketWatcher>(io, socket_, [this] { return receive_one(); });
    watcher_->start();
    monitor_watcher_ = std::make_unique<SocketWatcher>(io, monitor_, [this] { return monitor_event(); });
    monitor_watcher_->start();
    return Status::ok();
  }

  Status send(const std::string& payload) override {
    try {
      auto sent = socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      watcher_->schedule_drain();
      if (!sent) {
        return unavailable("not connected to the coordinator at " + endpoint_ + " (" +
                           (handshake_failure_.empty() ? std::string("queue full") : handshake_failure_) +
                           "); message dropped");
      }
    } catch (const zmq::error_t& e) {
      watcher_->schedule_drain();
      return unavailable(std::string("cannot send: ") + e.what());
    }
    return Status::ok();
  }

  std::string handshake_problem() const override { return handshake_failure_; }
  void set_disconnect_handler(std::function<void()> handler) override { on_disconnect_ = std::move(handler); }

 private:
  bool receive_one() {
    zmq::message_t message;
    std::optional<size_t> got;
    try {
      got = socket_.recv(message, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("receive failed: {}", e.what());
      return false;
    }
    if (!got) return false;
    handler_(message.to_string());
    return true;
  }

  bool monitor_event() {
    zmq::message_t head, address;
    if (!monitor_.recv(head, zmq::recv_flags::dontwait)) return false;
    if (head.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (head.size() < 6) return true;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      handshake_failure_.clear();
      established_ = true;
      return true;
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      // Only a connection that got through its handshake: a refused key
      // also ends in a disconnect, and says nothing about the coordinator.
      bool was_established = std::exchange(established_, false);
      if (was_established && on_disconnect_) on_disconnect_();
      return true;
    }
    handshake_failure_ =
        event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
            ? "the coordinator refused this key (ZAP status " + std::to_string(value) +
                  "): add it to the coordinator's authorized_agents (cohort keygen DIR --role agent --authorize COORD)"
            : "CURVE handshake failed (protocol error " + std::to_string(value) +
                  "): check server.public in --keys, and that the coordinator runs with keys";
    warn_bad_input("connection to " + endpoint_ + ": " + handshake_failure_);
    return true;
  }

  std::shared_ptr<zmq::context_t> context_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_{*context_, zmq::socket_type::pair};
  Handler handler_;
  std::string endpoint_;
  std::string handshake_failure_;
  bool established_ = false;  // the current connection completed its handshake
  std::function<void()> on_disconnect_;
  std::unique_ptr<SocketWatcher> watcher_;
  std::unique_ptr<SocketWatcher> monitor_watcher_;
};

}  // namespace

std::shared_ptr<zmq::context_t> make_zmq_context() { return std::make_shared<zmq::context_t>(1); }

Result<std::unique_ptr<RouterEndpoint>> RouterEndpoint::bind(
    asio::io_context& io, std::shared_ptr<zmq::context_t> context, const std::string& endpoint,
    const Security& security, Handler handler) {
  auto router = std::make_unique<ZmqRouter>(std::move(context), std::move(handler));
  COHORT_RETURN_IF_ERROR(router->open(io, endpoint, security));
  return std::unique_ptr<RouterEndpoint>(std::move(router));
}

Result<std::unique_ptr<DealerEndpoint>> DealerEndpoint::connect(
    asio::io_context& io, std::shared_ptr<zmq::context_t> context, const std::string& endpoint,
    const Security& security, Handler handler) {
  auto dealer = std::make_unique<ZmqDealer>(std::move(context), std::move(handler));
  COHORT_RETURN_IF_ERROR(dealer->open(io, endpoint, security));
  return std::unique_ptr<DealerEndpoint>(std::move(dealer));
}

}  // namespace cohort::protocol
