// The blocking client: one DEALER socket, zmq_poll with a deadline.
#include "protocol/client.h"

#include <cstdlib>

#include <zmq.hpp>

namespace cohort::protocol {
namespace {

class ZmqClient final : public Client {
 public:
  ZmqClient() : context_(1), socket_(context_, zmq::socket_type::dealer) {}

  Status open(const std::string& endpoint, const Security& security) {
    endpoint_ = endpoint;
    try {
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
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, left);
        if (!(item.revents & ZMQ_POLLIN)) continue;
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
  zmq::context_t context_;
  zmq::socket_t socket_;
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
  if (const char* env = std::getenv("COHORT_COORDINATOR"); env && *env) return env;
  return "tcp://127.0.0.1:7070";
}

}  // namespace cohort::protocol
