// The blocking client: one DEALER socket, zmq_poll with a deadline.
#include "protocol/client.h"
#include "base/env_knobs.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <zmq.hpp>

namespace cohort::protocol {
namespace {

class ZmqClient final : public Client {
 public:
  ZmqClient() : context_(1), socket_(context_, zmq::socket_type::dealer) {}

  Status open(const std::string& endpoint, const Security& security) {
    endpoint_ = endpoint;
    secure_ = security.enabled;
    public_key_ = security.own.public_key;
    try {
      // Handshake failures are events on a monitor socket, never replies:
      // without it a refused key looked like a coordinator that is down.
      std::string monitor = "inproc://cohort-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
      zmq_socket_monitor(socket_.handle(), monitor.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
      monitor_.connect(monitor);
      if (security.enabled) {
        socket_.set(zmq::sockopt::curve_serverkey, security.server_public_key);
        socket_.set(zmq::sockopt::curve_publickey, security.own.public_key);
        socket_.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
      }
      socket_.set(zmq::sockopt::linger, 0);
      socket_.set(zmq::sockopt::maxmsgsize, int64_t(4 * kMaxMessageBytes));
      socket_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      return unavailable("cannot connect to coordinator at " + endpoint + ": " + e.what());
    }
    return Status::ok();
  }

  Result<Envelope> call(const std::string& type, const nlohmann::json& body,
                        std::chrono::milliseconds timeout) override {
    Envelope request;
    request.type = type;
    request.id = ++next_id_;
    request.body = body;
    std::string payload = encode_envelope(request);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    try {
      if (!socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait)) {
        return unavailable("cannot reach the coordinator at " + endpoint_);
      }
      while (true) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                    {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, 2, left);
        if (items[1].revents & ZMQ_POLLIN) {
          Status refused = read_monitor_event();
          if (!refused) return refused;
        }
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        zmq::message_t message;
        if (!socket_.recv(message, zmq::recv_flags::dontwait)) continue;
        auto reply = decode(std::string_view(static_cast<const char*>(message.data()), message.size()));
        if (!reply) return reply.status().with_context("bad reply from the coordinator");
        if (reply->id != request.id) continue;  // a late reply to an earlier call
        if (reply->type == ErrorReply::kType) {
          auto error = body_as<ErrorReply>(*reply);
          if (!error) return error.status();
          return error_status(*error);
        }
        return reply;
      }
    } catch (const zmq::error_t& e) {
      return unavailable("coordinator at " + endpoint_ + ": " + e.what());
    }
    return unavailable("no reply from the coordinator at " + endpoint_ + " within " +
                       std::to_string(timeout.count()) + " ms (is it running? is the address right?)");
  }

 private:
  // One monitor event (two frames: u16 event + u32 value, then the address).
  Status read_monitor_event() {
    zmq::message_t head, address;
    if (!monitor_.recv(head, zmq::recv_flags::dontwait)) return Status::ok();
    if (head.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (head.size() < 6) return Status::ok();
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      return permission_denied("the coordinator at " + endpoint_ + " refused this client's key " +
                               public_key_ + " (ZAP status " + std::to_string(value) +
                               "): have it added to the coordinator's authorized_clients "
                               "(cohort keygen DIR --role client --authorize COORD), or check --keys");
    }
    return unavailable(std::string("the CURVE handshake with ") + endpoint_ + " failed (" +
                       (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error " + std::to_string(value)
                                                                     : std::string("no detail")) +
                       "): " +
                       (secure_ ? "is server.public in --keys the coordinator's own key, and does it run with --keys?"
                                : "the coordinator requires CURVE keys: pass --keys DIR (cohort keygen)"));
  }

  zmq::context_t context_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_{context_, zmq::socket_type::pair};
  bool secure_ = false;
  std::string public_key_;
  std::string endpoint_;
  uint64_t next_id_ = 0;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const std::string& endpoint,
                                                const Security& security) {
  auto client = std::make_unique<ZmqClient>();
  COHORT_RETURN_IF_ERROR(client->open(endpoint, security));
  return std::unique_ptr<Client>(std::move(client));
}

std::string default_coordinator(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = read_env_knob(EnvKnob::kCoordinator)) return env;
  return "tcp://127.0.0.1:7070";
}

}  // namespace cohort::protocol
