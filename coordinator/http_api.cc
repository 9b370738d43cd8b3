// HttpApi over Boost.Beast: one request per connection, answered from
// snapshots the coordinator hands over.
#include "coordinator/http_api.h"

#include <map>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "protocol/codec.h"

namespace cohort::coordinator {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string metrics_text(const std::vector<protocol::JobInfo>& jobs,
                         const std::vector<protocol::NodeInfo>& nodes) {
  std::map<std::string, int> node_states{{"alive", 0}, {"lost", 0}};
  int gpus = 0, free = 0;
  for (const auto& n : nodes) {
    ++node_states[n.state];
    if (n.state == "alive") {
      gpus += int(n.gpus.size());
      free += n.gpus_free;
    }
  }
  std::map<std::string, int> job_states{{"queued", 0},    {"running", 0}, {"stopping", 0},
                                        {"succeeded", 0}, {"failed", 0},  {"cancelled", 0}};
  int restarts = 0;
  for (const auto& j : jobs) {
    ++job_states[j.state];
    restarts += j.restarts_used;
  }
  std::string out;
  out += "# HELP cohort_nodes Nodes known to the coordinator, by state.\n# TYPE cohort_nodes gauge\n";
  for (const auto& [s, n] : node_states) out += "cohort_nodes{state=\"" + s + "\"} " + std::to_string(n) + "\n";
  out += "# HELP cohort_gpus GPUs on alive nodes.\n# TYPE cohort_gpus gauge\n";
  out += "cohort_gpus{state=\"total\"} " + std::to_string(gpus) + "\n";
  out += "cohort_gpus{state=\"free\"} " + std::to_string(free) + "\n";
  out += "# HELP cohort_jobs Jobs by state.\n# TYPE cohort_jobs gauge\n";
  for (const auto& [s, n] : job_states) out += "cohort_jobs{state=\"" + s + "\"} " + std::to_string(n) + "\n";
  out += "# HELP cohort_job_restarts_total Failure restarts used, over all jobs.\n"
         "# TYPE cohort_job_restarts_total counter\n";
  out += "cohort_job_restarts_total " + std::to_string(restarts) + "\n";
  return out;
}

std::string index_page(const std::vector<protocol::JobInfo>& jobs,
                       const std::vector<protocol::NodeInfo>& nodes) {
  std::string out = "<!doctype html><meta charset=utf-8><title>cohort</title>"
                    "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}</style>"
                    "<h1>cohort</h1><h2>Nodes</h2><table><tr><th>node<th>state<th>GPUs free<th>jobs";
  for (const auto& n : nodes) {
    std::string js;
    for (const auto& j : n.jobs) js += (js.empty() ? "" : ", ") + j;
    out += "<tr><td>" + html_escape(n.name) + "<td>" + n.state + "<td>" + std::to_string(n.gpus_free) +
           " of " + std::to_string(n.gpus.size()) + "<td>" + html_escape(js);
  }
  out += "</table><h2>Jobs</h2><table><tr><th>job<th>name<th>state<th>attempts<th>message";
  for (const auto& j : jobs) {
    out += "<tr><td><a href=\"/api/jobs/" + html_escape(j.id) + "\">" + html_escape(j.id) + "</a><td>" +
           html_escape(j.name) + "<td>" + j.state + "<td>" + std::to_string(j.attempts.size()) + "<td>" +
           html_escape(j.message);
  }
  return out + "</table>";
}

class Server;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server& server);
  ~Session();
  void start();

 private:
  void respond();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  Server& server_;
};

class Server final : public HttpApi {
 public:
  Server(asio::io_context& io, HttpSources sources, std::string token)
      : acceptor_(io), retry_(io), sources_(std::move(sources)), token_(std::move(token)) {}

  // Open connections; beyond kMaxSessions new ones are closed at once.
  static constexpr int kMaxSessions = 64;
  int sessions = 0;

  Status open(const std::string& listen) {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) return invalid_argument("--http wants HOST:PORT, got '" + listen + "'");
    boost::system::error_code ec;
    auto address = asio::ip::make_address(listen.substr(0, colon), ec);
    if (ec) return invalid_argument("--http: bad address in '" + listen + "': " + ec.message());
    int port = std::atoi(listen.substr(colon + 1).c_str());
    tcp::endpoint endpoint(address, uint16_t(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return unavailable("cannot serve HTTP on " + listen + ": " + ec.message());
    spdlog::info("HTTP API on http://{}:{}/ ({})", listen.substr(0, colon), this->port(),
                 token_.empty() ? "read-only" : "cancel allowed with the token");
    accept();
    return Status::ok();
  }

  int port() const override { return acceptor_.local_endpoint().port(); }

  void handle(const http::request<http::string_body>& req, http::response<http::string_body>& res) {
    std::string target(req.target());
    auto reply = [&](http::status status, std::string body, const char* type) {
      res.result(status);
      res.set(http::field::content_type, type);
      res.body() = std::move(body);
    };
    auto json = [&](const nlohmann::json& j) {
      reply(http::status::ok, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace),
            "application/json");
    };
    auto error = [&](http::status status, const std::string& text) {
      // The text may echo the request target: invalid UTF-8 there made dump()
      // throw and took the coordinator down (found by fuzz/http_fuzz).
      reply(status,
            nlohmann::json({{"error", text}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
            "application/json");
    };
    if (req.method() == http::verb::get) {
      if (target == "/" || target == "/index.html") return reply(http::status::ok, index_page(sources_.jobs(), sources_.nodes()), "text/html");
      if (target == "/metrics") {
        return reply(http::status::ok, metrics_text(sources_.jobs(), sources_.nodes()),
                     "text/plain; version=0.0.4");
      }
      if (target == "/api/jobs") return json(sources_.jobs());
      if (target == "/api/nodes") return json(sources_.nodes());
      const std::string prefix = "/api/jobs/";
      if (target.rfind(prefix, 0) == 0) {
        std::string id = target.substr(prefix.size());
        for (const auto& j : sources_.jobs()) {
          if (j.id == id) return json(j);
        }
        return error(http::status::not_found, "no job '" + id + "'");
      }
      return error(http::status::not_found, "no such page: " + target);
    }
    if (req.method() == http::verb::post) {
      if (token_.empty()) return error(http::status::forbidden, "the HTTP API is read-only (no --http-token)");
      if (req[http::field::authorization] != "Bearer " + token_) {
        return error(http::status::unauthorized, "missing or wrong bearer token");
      }
      const std::string prefix = "/api/jobs/", suffix = "/cancel";
      if (target.rfind(prefix, 0) == 0 && target.size() > prefix.size() + suffix.size() &&
          target.compare(target.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string id = target.substr(prefix.size(), target.size() - prefix.size() - suffix.size());
        Status s = sources_.cancel(id);
        if (!s) return error(s.code() == StatusCode::kNotFound ? http::status::not_found : http::status::bad_request, s.message());
        return json({{"cancelling", id}});
      }
      return error(http::status::not_found, "no such action: " + target);
    }
    error(http::status::method_not_allowed, "GET or POST only");
  }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // EMFILE and the like: the connection stays queued and accept fails
        // again at once; wait instead of spinning at 100% CPU.
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](boost::system::error_code wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      if (sessions < kMaxSessions) std::make_shared<Session>(std::move(socket), *this)->start();
      accept();  // a socket over the cap is closed as it goes out of scope
    });
  }

  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  HttpSources sources_;
  std::string token_;
};

Session::Session(tcp::socket socket, Server& server) : stream_(std::move(socket)), server_(server) {
  ++server_.sessions;
}
Session::~Session() { --server_.sessions; }

void Session::start() {
  stream_.expires_after(std::chrono::seconds(10));
  http::async_read(stream_, buffer_, request_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (ec) {
                       if (ec != http::error::end_of_stream) {
                         spdlog::debug("HTTP: bad request: {}", ec.message());
                         self->response_.result(http::status::bad_request);
                         self->response_.body() = "bad request\n";
                         self->response_.prepare_payload();
                         http::async_write(self->stream_, self->response_,
                                           [self](beast::error_code, size_t) {
                                             beast::error_code ignored;
                                             self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
                                           });
                       }
                       return;
                     }
                     self->respond();
                   });
}

void Session::respond() {
  response_.version(request_.version());
  response_.keep_alive(false);
  response_.set(http::field::server, "cohort");
  server_.handle(request_, response_);
  response_.prepare_payload();
  http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
    beast::error_code ignored;
    self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  });
}

}  // namespace

Result<std::unique_ptr<HttpApi>> HttpApi::start(asio::io_context& io, const std::string& listen,
                                                HttpSources sources, std::string token) {
  auto server = std::make_unique<Server>(io, std::move(sources), std::move(token));
  COHORT_RETURN_IF_ERROR(server->open(listen));
  return std::unique_ptr<HttpApi>(std::move(server));
}

}  // namespace cohort::coordinator
