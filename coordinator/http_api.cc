// HttpApi on the shared HTTP core (base/http_server.h): one request per
// connection, answered from snapshots the coordinator hands over.
#include "coordinator/http_api.h"

#include <cctype>
#include <cstdlib>
#include <map>
#include <random>
#include <string_view>

#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/http_server.h"
#include "base/host_address.h"
#include "coordinator/dashboard_page.h"
#include "coordinator/job_record.h"
#include "coordinator/prometheus_text.h"
#include "protocol/codec.h"
#include "protocol/input_log.h"

namespace cohort::coordinator {
namespace {

namespace http_core = cohort::http;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// "/jobs/job-3?rank=1&x=time" → path and decoded query parameters.
struct Target {
  std::string path;
  std::map<std::string, std::string> query;
  std::string param(const std::string& key, const std::string& fallback = "") const {
    auto it = query.find(key);
    return it == query.end() ? fallback : it->second;
  }
  // An integer parameter; `fallback` when absent or not a number.
  int64_t number(const std::string& key, int64_t fallback) const {
    auto it = query.find(key);
    if (it == query.end() || it->second.empty()) return fallback;
    char* end = nullptr;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    return *end == '\0' ? int64_t(v) : fallback;
  }
};

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(uint8_t(s[i + 1])) && std::isxdigit(uint8_t(s[i + 2]))) {
      out += char(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

Target parse_target(std::string_view target) {
  Target t;
  auto q = target.find('?');
  t.path = url_decode(target.substr(0, q));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty() && t.query.size() < 32) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    auto eq = pair.find('=');
    t.query[url_decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : url_decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return t;
}

// "/jobs/job-3/cancel" with prefix "/jobs/" → {"job-3", "cancel"}.
std::pair<std::string, std::string> split_job_path(const std::string& path, const std::string& prefix) {
  std::string rest = path.substr(prefix.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos) return {rest, ""};
  return {rest.substr(0, slash), rest.substr(slash + 1)};
}

std::string cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    auto semi = header.find(';');
    std::string_view part = header.substr(0, semi);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.substr(0, name.size()) == name && part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return "";
}

// Equal-time comparison, so the token cannot be guessed byte by byte.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

nlohmann::json series_json(const JobView& view) {
  auto points = [](const std::vector<TrainingPoint>& ps, std::initializer_list<Figure> figures) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : ps) {
      nlohmann::json row = {{"step", p.step}, {"time", p.time}};
      for (Figure f : figures) {
        if (p.has(f)) row[row_key(f)] = p.get(f);
      }
      out.push_back(std::move(row));
    }
    return out;
  };
  const auto& t = *view.training;
  return {{"job", view.info.id},
          {"total_steps", view.total_steps},
          {"training", points(t.training(), {Figure::kLoss, Figure::kLearningRate, Figure::kTokensPerSecond,
                                             Figure::kMfu, Figure::kGradNorm})},
          {"evaluation", points(t.evaluation(), {Figure::kEvalLoss})}};
}

// A page's cancel form carries this (with the cookie): a random value per
// coordinator process, so another origin cannot forge the form.
std::string random_hex(size_t bytes) {
  std::random_device random;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", random() & 0xff);
  return out;
}

// True when the request comes from a page of this server: its Origin, else
// its Referer, names the Host it was sent to. A browser sends one of them
// with every form POST; another port on the same host is another origin.
bool same_origin(const http::request<http::string_body>& req) {
  std::string host(req[http::field::host]);
  if (host.empty()) return false;
  std::string origin(req[http::field::origin]);
  if (!origin.empty()) return origin == "http://" + host || origin == "https://" + host;
  std::string referer(req[http::field::referer]);
  for (const char* scheme : {"http://", "https://"}) {
    std::string base = scheme + host + "/";
    if (referer.rfind(base, 0) == 0 || referer == scheme + host) return true;
  }
  return false;
}

// Connections (DESIGN §4 "Bounded", docs/security.md): at most 64 open and
// 16 from one address; a request's first byte within 2 s and the whole of
// it within 5 s; when a cap is reached the connection that has waited
// longest for its request makes room (base/connection_slots.h).
const http_core::ServerLimits kLimits{ConnectionLimits{64, 16}, std::chrono::seconds(2), std::chrono::seconds(5)};

class Server;

// One request, answered from the coordinator's snapshots (Server::handle).
class Session final : public http_core::Connection {
 public:
  Session(tcp::socket socket, std::shared_ptr<http_core::SlotTable> table, uint64_t slot, Server& server)
      : http_core::Connection(std::move(socket), std::move(table), slot, kLimits), server_(server) {}

 private:
  void on_request(beast::error_code ec, http_core::Request& request) override;
  Server& server_;
};

class Server final : public HttpApi {
 public:
  Server(asio::io_context& io, HttpSources sources, std::string token)
      : listener_(io, kLimits,
                  [this](tcp::socket socket, std::shared_ptr<http_core::SlotTable> table, uint64_t slot) {
                    return std::make_shared<Session>(std::move(socket), std::move(table), slot, *this);
                  }),
        sources_(std::move(sources)), token_(std::move(token)), csrf_(random_hex(16)) {}
  ~Server() override { listener_.close(); }

  Status open(const std::string& listen) {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) return invalid_argument("--http wants HOST:PORT, got '" + listen + "'");
    boost::system::error_code ec;
    asio::ip::make_address(listen.substr(0, colon), ec);  // only checked here; the listener binds it
    if (ec) return invalid_argument("--http: bad address in '" + listen + "': " + ec.message());
    // Anyone who can reach the page sees every job's logs; off loopback the
    // operator must have chosen a token (DESIGN §4).
    if (!is_loopback_host(listen.substr(0, colon)) && token_.empty()) {
      return invalid_argument("--http " + listen + " is not a loopback address: give --http-token (or "
                              "COHORT_HTTP_TOKEN) to serve the web page there");
    }
    int port = std::atoi(listen.substr(colon + 1).c_str());
    COHORT_RETURN_IF_ERROR(listener_.open(listen.substr(0, colon), port, "--http " + listen));
    spdlog::info("HTTP API on http://{}:{}/ ({})", listen.substr(0, colon), this->port(),
                 token_.empty() ? "read-only" : "cancel allowed with the token");
    return Status::ok();
  }

  int port() const override { return listener_.port(); }

  void handle(const http::request<http::string_body>& req, http::response<http::string_body>& res) {
    Target target = parse_target(std::string_view(req.target().data(), req.target().size()));
    auto reply = [&](http::status status, std::string body, const char* type) {
      res.result(status);
      res.set(http::field::content_type, type);
      res.set(http::field::cache_control, "no-store");
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
    auto redirect = [&](const std::string& to) {
      res.result(http::status::see_other);
      res.set(http::field::location, to);
    };
    bool has_cookie = !token_.empty() && same_secret(cookie_value(std::string(req[http::field::cookie]), "cohort_token"), token_);
    bool bearer = !token_.empty() && same_secret(std::string(req[http::field::authorization]), "Bearer " + token_);
    if (req.method() == http::verb::get && target.path == "/health") {
      return json({{"status", "ok"}});
    }
    if (req.method() == http::verb::get) {
      // A browser hands over the token once; the cookie carries it from then on.
      if (target.query.count("token")) {
        if (token_.empty() || !same_secret(target.param("token"), token_)) {
          return error(http::status::unauthorized, "wrong token");
        }
        res.set(http::field::set_cookie, "cohort_token=" + token_ + "; Path=/; HttpOnly; SameSite=Strict");
        return redirect(target.path);
      }
      PageContext context{unix_ms_now(), has_cookie, has_cookie ? csrf_ : ""};
      const std::string& path = target.path;
      // With a token, a job's details and its workers' output are the
      // token holder's (they may carry secrets); lists and /metrics are not.
      bool job_details = path.rfind("/api/jobs/", 0) == 0 || path.rfind("/jobs/", 0) == 0;
      if (job_details && !token_.empty() && !bearer && !has_cookie) {
        return error(http::status::unauthorized,
                     "a job's details and logs need the HTTP token: `Authorization: Bearer TOKEN`, or open "
                     "any page once with ?token=TOKEN");
      }
      if (path == "/" || path == "/index.html") {
        return reply(http::status::ok, cluster_page(sources_.jobs(), sources_.nodes(), context), "text/html; charset=utf-8");
      }
      if (path == "/metrics") {
        return reply(http::status::ok, prometheus_text(sources_.jobs(), sources_.nodes(), context.now_ms),
                     "text/plain; version=0.0.4");
      }
      if (path == "/api/jobs") {
        std::vector<protocol::JobInfo> infos;
        for (auto& v : sources_.jobs()) infos.push_back(std::move(v.info));
        return json(infos);
      }
      if (path == "/api/nodes") return json(sources_.nodes());
      if (path.rfind("/api/jobs/", 0) == 0) return api_job(target, json, error);
      if (path.rfind("/jobs/", 0) == 0) {
        auto [id, rest] = split_job_path(path, "/jobs/");
        auto view = sources_.job(id);
        if (!view || !rest.empty()) return error(http::status::not_found, "no job '" + id + "'");
        JobPageOptions options;
        options.log_rank = int(std::clamp<int64_t>(target.number("rank", -1), -1, 1 << 20));
        options.x_time = target.param("x") == "time";
        protocol::LogQuery q;
        q.job_id = view->info.id;
        q.rank = options.log_rank;
        auto log = sources_.logs(q, kPageLogLines);
        if (!log) options.log_hidden = log.status().message();
        return reply(http::status::ok, job_page(*view, log ? *log : protocol::LogReply{}, options, context),
                     "text/html; charset=utf-8");
      }
      return error(http::status::not_found, "no such page: " + path);
    }
    if (req.method() == http::verb::post) {
      if (token_.empty()) return error(http::status::forbidden, "the HTTP API is read-only (no --http-token)");
      const std::string& path = target.path;
      bool from_page = path.rfind("/jobs/", 0) == 0;
      if (!(bearer || (from_page && has_cookie))) {
        return error(http::status::unauthorized, "missing or wrong bearer token");
      }
      if (!bearer) {
        // The cookie alone travels with any request the browser makes, also
        // from another site's page: the form must come from this origin
        // and carry the page's CSRF token.
        if (!same_origin(req)) {
          spdlog::warn("HTTP: refused a cross-origin POST {} (Origin '{}', Referer '{}')", protocol::shorten(path, 200),
                       protocol::shorten(std::string(req[http::field::origin]), 200),
                       protocol::shorten(std::string(req[http::field::referer]), 200));
          return error(http::status::forbidden, "cross-origin request refused");
        }
        Target form = parse_target("?" + req.body().substr(0, 4096));
        if (!same_secret(form.param("csrf"), csrf_)) {
          return error(http::status::forbidden, "missing or stale CSRF token: reload the page and try again");
        }
      }
      auto [id, action] = split_job_path(path, from_page ? "/jobs/" : "/api/jobs/");
      if ((from_page || path.rfind("/api/jobs/", 0) == 0) && action == "cancel" && !id.empty()) {
        Status s = sources_.cancel(id);
        if (!s) return error(s.code() == StatusCode::kNotFound ? http::status::not_found : http::status::bad_request, s.message());
        if (from_page) return redirect("/jobs/" + id);
        return json({{"cancelling", id}});
      }
      return error(http::status::not_found, "no such action: " + path);
    }
    error(http::status::method_not_allowed, "GET or POST only");
  }

 private:
  static constexpr size_t kPageLogLines = 200;
  static constexpr size_t kMaxApiLogLines = 5000;

  template <typename Json, typename Error>
  void api_job(const Target& target, const Json& json, const Error& error) {
    auto [id, rest] = split_job_path(target.path, "/api/jobs/");
    if (rest.empty()) {
      auto view = sources_.job(id);
      if (!view) return error(http::status::not_found, "no job '" + id + "'");
      return json(view->info);
    }
    if (rest == "metrics") {
      auto view = sources_.job(id);
      if (!view) return error(http::status::not_found, "no job '" + id + "'");
      return json(series_json(*view));
    }
    if (rest == "logs") {
      protocol::LogQuery q;
      q.job_id = id;
      q.rank = int(std::clamp<int64_t>(target.number("rank", -1), -1, 1 << 20));
      q.attempt = int(std::clamp<int64_t>(target.number("attempt", -1), -1, 1 << 20));
      q.after_seq = uint64_t(std::max<int64_t>(0, target.number("after", 0)));
      int64_t tail = std::clamp<int64_t>(target.number("tail", 0), 0, kMaxApiLogLines);
      q.max_lines = int(std::clamp<int64_t>(target.number("limit", 1000), 1, kMaxApiLogLines));
      auto reply = sources_.logs(q, size_t(tail));
      if (!reply) {
        return error(reply.status().code() == StatusCode::kPermissionDenied ? http::status::forbidden
                                                                             : http::status::not_found,
                     reply.status().message());
      }
      return json(*reply);
    }
    error(http::status::not_found, "no such page: " + target.path);
  }

 private:
  http_core::Listener listener_;
  HttpSources sources_;
  std::string token_;
  const std::string csrf_;
};

void Session::on_request(beast::error_code ec, http_core::Request& request) {
  if (ec) {
    spdlog::debug("HTTP: bad request: {}", ec.message());
    return send_last(http_core::response_text(400, "text/plain", "bad request\n"));
  }
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(false);
  response.set(http::field::server, "cohort");
  try {
    server_.handle(request, response);
  } catch (const std::exception& e) {
    // A page must never take the coordinator down with it.
    spdlog::error("HTTP: {} {}: {}", std::string(request.method_string()), std::string(request.target()), e.what());
    response = {};
    response.version(request.version());
    response.keep_alive(false);
    response.result(http::status::internal_server_error);
    response.body() = "internal error\n";
  }
  response.prepare_payload();
  std::ostringstream text;
  text << response;
  send_last(text.str());
}

}  // namespace

Result<std::unique_ptr<HttpApi>> HttpApi::start(asio::io_context& io, const std::string& listen,
                                                HttpSources sources, std::string token) {
  auto server = std::make_unique<Server>(io, std::move(sources), std::move(token));
  COHORT_RETURN_IF_ERROR(server->open(listen));
  return std::unique_ptr<HttpApi>(std::move(server));
}

}  // namespace cohort::coordinator
