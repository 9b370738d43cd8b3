// The server's HTTP side (see serve_http.h), on the shared HTTP core
// (base/http_server.h). Every Connection lives on the io thread; requests
// in flight are found by id in Server::live_.
#include "infer/serve/serve_http.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "base/http_server.h"
#include "infer/output_processor.h"
#include "infer/serve/prompt_workers.h"
#include "infer/serve/tool_calls.h"

namespace cohort::infer {
namespace {

namespace http_core = cohort::http;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

bool same_key(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Connection bounds besides max_connections (docs/security.md): the first
// byte of a request within 10 s of accept, the whole of it within 30 s.
http_core::ServerLimits server_limits(const ServeHttpOptions& options) {
  http_core::ServerLimits limits;
  limits.connections = ConnectionLimits{size_t(std::max(1, options.max_connections)),
                                        size_t(std::max(1, options.max_connections_per_address))};
  limits.first_byte = std::chrono::seconds(10);
  limits.whole_request = std::chrono::seconds(30);
  limits.max_body_bytes = static_cast<uint64_t>(std::max(0, options.max_body_bytes));
  return limits;
}

class Server;

class Connection final : public http_core::Connection {
 public:
  Connection(tcp::socket socket, std::shared_ptr<http_core::SlotTable> table, uint64_t slot, Server& server);
  ~Connection() override;
  void on_event(const TokenEvent& e);

 private:
  std::shared_ptr<Connection> self() { return std::static_pointer_cast<Connection>(shared_from_this()); }
  void on_request(beast::error_code ec, http_core::Request& request) override;
  void on_write_error() override { gone(); }
  void route(http_core::Request& request);
  void completion(bool chat);
  // POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
  // /v1/unload_lora_adapter {"lora_name"} (vLLM's endpoints): answered once
  // the loop made the change on every rank.
  void adapter_change(bool load, const std::string& body);
  // Back on the io thread with the parsed request (prompt tokenized).
  void prompt_ready(bool chat, const std::optional<ApiError>& parse_error, CompletionRequest request);
  void reply(int status, const std::string& type, const std::string& body);
  void error(const ApiError& e) { reply(e.status, "application/json", error_body(e)); }
  // Response bytes: counted in Server::responding_ from the first.
  void respond(std::string data, bool last);
  void watch_client();
  void gone();

  Server& server_;
  std::string body_;  // the request's, for the prompt thread
  bool responding_ = false;  // counted in Server::responding_
  char probe_[256];
  // One sequence per choice (CompletionRequest::choices()), with
  // consecutive ids from first_id_.
  struct Choice {
    std::optional<OutputProcessor> output;
    std::unique_ptr<ToolCallParser> tools;  // with parse_tool_calls
    std::shared_ptr<text::TokenConstraint> guide;  // with structured output
    size_t sent_tokens = 0;        // streamed so far
    bool done = false;
    std::string finish_reason;     // once done
    Clock::time_point last_token;
  };
  // What the client gets of choice i: its new text (all of it when not
  // streaming) and, as asked, the tokens, logprobs and alternatives behind it.
  ChoiceUpdate update(int i, const std::string& finish_reason);
  void cancel_unfinished();

  // The generation, once accepted.
  int64_t first_id_ = -1;
  bool done_ = false, cancelled_ = false, failed_ = false;
  int finished_ = 0;               // choices done
  CompletionRequest req_;
  ResponseHead head_;
  std::vector<Choice> choices_;
  Clock::time_point arrived_;
};

class Server final : public ServeHttp {
 public:
  Server(ServeHttpOptions options, GenerationQueue* queue, ServeMetrics* metrics)
      : options_(std::move(options)), queue_(queue), metrics_(metrics),
        io_(std::make_unique<asio::io_context>(1)),
        listener_(std::in_place, *io_, server_limits(options_),
                  [this](tcp::socket socket, std::shared_ptr<http_core::SlotTable> table, uint64_t slot) {
                    return std::make_shared<Connection>(std::move(socket), std::move(table), slot, *this);
                  },
                  http_core::response_text(503, "application/json",
                                           error_body({503, "too many connections", "server_error", "", "overloaded"})),
                  [this] { metrics_->count_response(503); }),
        workers_(std::make_unique<PromptWorkers>(options_.tokenizer.get(), options_.prompt_threads,
                                                 size_t(std::max(1, options_.max_pending_prompts)))) {}

  ~Server() override {
    workers_.reset();  // a job in progress finishes; its reply is posted to io_, never run
    io_->stop();
    if (thread_.joinable()) thread_.join();
    live_.clear();
    // The acceptor and the connections deregister from the io_context's
    // reactor as they close, so they go first; destroying io_ then destroys
    // the pending handlers, and with them the connections they hold.
    listener_.reset();
    io_.reset();
  }

  Status open() {
    COHORT_RETURN_IF_ERROR(listener_->open(options_.host, options_.port, "serve.host"));
    port_ = listener_->port();
    thread_ = std::thread([this] { io_->run(); });
    return Status::ok();
  }

  int port() const override { return port_; }
  void set_state(ServeState s) override { state_ = s; }
  ServeState state() const { return state_; }
  const char* state_name() const {
    switch (state_.load()) {
      case ServeState::kLoading: return "loading";
      case ServeState::kReady: return "ready";
      case ServeState::kDraining: return "draining";
    }
    return "?";
  }
  int live() const override { return live_count_; }

  void deliver(std::vector<TokenEvent> events) override {
    asio::post(*io_, [this, events = std::move(events)] {
      for (const TokenEvent& e : events) {
        auto it = live_.find(e.id);
        if (it == live_.end()) continue;
        auto conn = it->second;  // on_event may finish and unregister it
        conn->on_event(e);
      }
    });
  }

  void cancel_all() override {
    asio::post(*io_, [this] {
      for (const auto& entry : live_) queue_->cancel(entry.first);
    });
  }

  // Registers an accepted generation of `count` sequences under consecutive
  // ids from *first; false when the server is full.
  bool admit(const std::shared_ptr<Connection>& c, int count, int64_t* first) {
    if (static_cast<int>(live_.size()) + count > options_.max_live) return false;
    *first = next_id_;
    next_id_ += count;
    for (int i = 0; i < count; ++i) live_[*first + i] = c;
    live_count_ = static_cast<int>(live_.size());
    return true;
  }
  void unregister(int64_t id) {
    live_.erase(id);
    live_count_ = static_cast<int>(live_.size());
  }

  const ServeHttpOptions& options() const { return options_; }
  GenerationQueue& queue() { return *queue_; }
  PromptWorkers& workers() { return *workers_; }
  asio::io_context& io() { return *io_; }
  ServeMetrics& metrics() { return *metrics_; }
  int responding() const override { return responding_; }
  std::atomic<int> open_{0}, responding_{0};

 private:
  ServeHttpOptions options_;
  GenerationQueue* queue_;
  ServeMetrics* metrics_;
  std::unique_ptr<asio::io_context> io_;
  std::optional<http_core::Listener> listener_;  // reset before io_ (see ~Server)
  std::thread thread_;
  int port_ = 0;
  std::atomic<ServeState> state_{ServeState::kLoading};
  std::unordered_map<int64_t, std::shared_ptr<Connection>> live_;  // io thread only
  std::atomic<int> live_count_{0};
  int64_t next_id_ = 1;
  std::unique_ptr<PromptWorkers> workers_;
};

Connection::Connection(tcp::socket socket, std::shared_ptr<http_core::SlotTable> table, uint64_t slot,
                       Server& server)
    : http_core::Connection(std::move(socket), std::move(table), slot, server_limits(server.options())),
      server_(server) {
  ++server_.open_;
}

Connection::~Connection() {
  --server_.open_;
  if (responding_) --server_.responding_;
}

void Connection::on_request(beast::error_code ec, http_core::Request& request) {
  if (ec == http::error::body_limit) {
    return error({413, "the request body is larger than " +
                           std::to_string(server_.options().max_body_bytes) + " bytes",
                  "invalid_request_error", "", "body_too_large"});
  }
  if (ec) return error({400, "malformed HTTP request: " + ec.message(), "invalid_request_error", "", ""});
  route(request);
}

void Connection::route(http_core::Request& req) {
  std::string target(req.target());
  if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  if (target == "/health") {
    if (!get) return error({405, "use GET", "invalid_request_error", "", ""});
    const bool ready = server_.state() == ServeState::kReady;
    return reply(ready ? 200 : 503, "application/json", json({{"status", server_.state_name()}}).dump());
  }
  if (target == "/metrics") {
    if (!get) return error({405, "use GET", "invalid_request_error", "", ""});
    return reply(200, "text/plain; version=0.0.4",
                 server_.metrics().render(server_.queue().gauges(), server_.state_name()));
  }
  const bool adapters = target == "/v1/load_lora_adapter" || target == "/v1/unload_lora_adapter";
  const bool v1 = target == "/v1/models" || target == "/v1/completions" || target == "/v1/chat/completions" || adapters;
  if (!v1) return error({404, "no such endpoint: " + target, "invalid_request_error", "", "not_found"});
  const std::string& key = server_.options().api_key;
  if (!key.empty() && !same_key(std::string(req[http::field::authorization]), "Bearer " + key)) {
    return error({401, "missing or wrong API key (Authorization: Bearer KEY)", "invalid_request_error", "",
                  "invalid_api_key"});
  }
  if (target == "/v1/models") {
    if (!get) return error({405, "use GET", "invalid_request_error", "", ""});
    // The base, then each adapter on it (vLLM lists a LoRA with its parent).
    const ApiDefaults& d = server_.options().defaults;
    json models = json::array({{{"id", d.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "cohort"},
                                {"max_model_len", d.context}}});
    for (const std::string& adapter : d.adapters->names()) {
      models.push_back({{"id", adapter}, {"object", "model"}, {"created", 0}, {"owned_by", "cohort"},
                        {"max_model_len", d.context}, {"parent", d.model_name}});
    }
    return reply(200, "application/json", json({{"object", "list"}, {"data", models}}).dump());
  }
  if (!post) return error({405, "use POST", "invalid_request_error", "", ""});
  if (adapters) {
    // Changing what the server runs takes its key: without one configured
    // (a loopback server anyone on the host reaches) the endpoints stay shut.
    if (key.empty()) {
      return error({403, "loading and unloading adapters needs serve.api_key", "invalid_request_error", "",
                    "forbidden"});
    }
    return adapter_change(target == "/v1/load_lora_adapter", req.body());
  }
  body_ = std::move(req.body());
  completion(target == "/v1/chat/completions");
}

void Connection::adapter_change(bool load, const std::string& body) {
  if (server_.state() != ServeState::kReady) {
    return error({503, "the server is not ready", "server_error", "", "unavailable"});
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return error({400, "the body must be a JSON object", "invalid_request_error", "", ""});
  AdapterChange change;
  change.load = load;
  const json* name = j.contains("lora_name") ? &j["lora_name"] : nullptr;
  if (!name || !name->is_string()) {
    return error({400, "'lora_name' must be a string", "invalid_request_error", "lora_name", ""});
  }
  change.name = name->get<std::string>();
  const bool plain = !change.name.empty() && change.name.size() <= 128 &&
                     std::all_of(change.name.begin(), change.name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                     });
  if (!plain) {
    return error({400, "'lora_name' is 1 to 128 of A-Z a-z 0-9 . _ -", "invalid_request_error", "lora_name", ""});
  }
  if (change.name == server_.options().defaults.model_name) {
    return error({400, "'lora_name' is the base model's name", "invalid_request_error", "lora_name", ""});
  }
  if (load) {
    const json* path = j.contains("lora_path") ? &j["lora_path"] : nullptr;
    if (!path || !path->is_string() || path->get<std::string>().empty() || path->get<std::string>().size() > 4096) {
      return error({400, "'lora_path' must be a folder's path", "invalid_request_error", "lora_path", ""});
    }
    change.folder = path->get<std::string>();
  }
  auto self = this->self();
  const std::string name_copy = change.name;
  server_.queue().change_adapter(std::move(change), [self, load, name_copy](Status status) {
    asio::post(self->server_.io(), [self, load, name_copy, status] {
      if (status.is_ok()) {
        return self->reply(200, "application/json",
                           json({{"object", "lora_adapter"}, {"id", name_copy}, {"loaded", load}}).dump());
      }
      const int code = status.code() == StatusCode::kNotFound             ? 404
                       : status.code() == StatusCode::kFailedPrecondition ? 409
                       : status.code() == StatusCode::kInvalidArgument    ? 400
                                                                          : 500;
      self->error({code, status.message(), code == 500 ? "server_error" : "invalid_request_error", "lora_name", ""});
    });
  });
}

void Connection::completion(bool chat) {
  if (server_.state() != ServeState::kReady) {
    return error({503, server_.state() == ServeState::kLoading ? "the model is still loading" : "the server is draining",
                  "server_error", "", "unavailable"});
  }
  // Rendering and tokenizing cost what the request makes them cost: on a
  // prompt thread, never here (this thread answers /health and streams).
  auto body = std::make_shared<std::string>(std::move(body_));
  auto self = this->self();
  const bool posted = server_.workers().post([self, body, chat](text::Tokenizer* tokenizer) {
    auto request = std::make_shared<CompletionRequest>();
    auto e = parse_completion_request(*body, chat, self->server_.options().defaults, tokenizer, request.get());
    asio::post(self->server_.io(), [self, request, e, chat] { self->prompt_ready(chat, e, std::move(*request)); });
  });
  if (!posted) {
    return error({503, "the server is busy preparing other prompts; retry later", "server_error", "", "overloaded"});
  }
}

void Connection::prompt_ready(bool chat, const std::optional<ApiError>& parse_error, CompletionRequest request) {
  if (closed()) return;
  if (parse_error) return error(*parse_error);
  if (server_.state() != ServeState::kReady) {
    return error({503, "the server is draining", "server_error", "", "unavailable"});
  }
  req_ = std::move(request);
  const auto& opts = server_.options();
  // The model's end-of-sequence ids join the client's stop ids, so that the
  // other ranks rebuild the same condition from the ids alone.
  if (!req_.ignore_eos) req_.stop_ids.insert(req_.stop_ids.end(), opts.eos.begin(), opts.eos.end());
  choices_.resize(size_t(req_.choices()));
  for (Choice& c : choices_) {
    auto output = OutputProcessor::create(opts.tokenizer.get(), req_.stop_ids, req_.stop_strings, req_.skip_special_tokens);
    if (!output.is_ok()) return error({400, output.status().message(), "invalid_request_error", "stop", ""});
    c.output.emplace(std::move(*output));
  }
  if (req_.grammar && !opts.vocabulary) {
    return error({400, "structured output needs the model's tokenizer, which this server has not", "invalid_request_error",
                  "response_format", ""});
  }
  if (!server_.admit(self(), req_.choices(), &first_id_)) {
    return error({429, "the server is full: " + std::to_string(opts.max_live) +
                           " requests are running or waiting; retry later",
                  "rate_limit_error", "", "queue_full"});
  }
  if (req_.grammar) {
    // The n choices share their masks (one grammar, the same states).
    auto masks = std::make_shared<text::MaskCache>();
    for (size_t i = 0; i < choices_.size(); ++i) {
      choices_[i].guide = std::make_shared<text::TokenConstraint>(req_.grammar, opts.vocabulary, masks);
    }
  }
  if (req_.parse_tool_calls) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      choices_[i].tools = make_tool_call_parser(req_.tool_format, std::to_string(first_id_) + "_" + std::to_string(i));
    }
  }
  arrived_ = Clock::now();
  head_ = ResponseHead{std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(first_id_),
                       std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count(),
                       req_.model, chat};
  for (int i = 0; i < req_.choices(); ++i) {
    SequenceRequest r;
    r.id = first_id_ + i;
    r.prompt = req_.prompt_of(i);
    r.max_new_tokens = req_.max_tokens;
    r.sampling = req_.sampling;
    // Choice j of each prompt samples from stream j: the n choices differ,
    // and a request with a seed repeats.
    r.sampler_stream = static_cast<uint64_t>(i % req_.n);
    r.adapter = req_.adapter;
    r.stop = choices_[size_t(i)].output->stop();
    r.logprobs = req_.logprobs;
    r.top_logprobs = req_.top_logprobs;
    r.arrived = arrived_;
    r.stop_ids = req_.stop_ids;
    r.stop_strings = req_.stop_strings;
    r.constraint = req_.constraint;
    r.guide = choices_[size_t(i)].guide;
    server_.metrics().add_tokens(static_cast<int64_t>(r.prompt.size()), 0);
    server_.queue().submit(std::move(r));
  }
  if (req_.stream) {
    server_.metrics().count_response(200);
    respond("HTTP/1.1 200 OK\r\nServer: cohort\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            /*last=*/false);
  }
  watch_client();
}

// The client never sends more after its request; a read that completes means
// it closed (or misbehaves), and either way its generation is cancelled.
void Connection::watch_client() {
  stream().socket().async_read_some(asio::buffer(probe_), [self = self()](beast::error_code, size_t) {
    if (self->done_ || self->closed()) return;
    self->gone();  // EOF, a reset, or bytes it should not send
  });
}

void Connection::gone() {
  mark_closed();
  if (first_id_ >= 0 && !done_ && !cancelled_) {
    cancelled_ = true;
    cancel_unfinished();
  }
}

void Connection::cancel_unfinished() {
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].done) server_.queue().cancel(first_id_ + int64_t(i));
  }
}

ChoiceUpdate Connection::update(int i, const std::string& finish_reason) {
  Choice& ch = choices_[size_t(i)];
  OutputProcessor& out = *ch.output;
  ChoiceUpdate c;
  c.index = i;
  c.finish_reason = finish_reason;
  const std::vector<int32_t>& tokens = out.tokens();
  const size_t from = req_.stream ? ch.sent_tokens : 0;
  c.text = out.take_text(!finish_reason.empty());
  ch.sent_tokens = tokens.size();
  if (ch.tools) {
    ToolParseOutput parsed = ch.tools->feed(c.text);
    if (!finish_reason.empty()) parsed.append(ch.tools->finish());
    c.text = std::move(parsed.content);
    c.tool_calls = std::move(parsed.calls);
    // A reply that ended by itself after calling tools ends for them.
    if (finish_reason == "stop" && ch.tools->calls() > 0) c.finish_reason = "tool_calls";
  }
  if (req_.return_token_ids) c.token_ids.assign(tokens.begin() + from, tokens.end());
  if (req_.logprobs) {
    for (size_t t = from; t < tokens.size(); ++t) {
      c.logprobs.push_back(out.logprobs()[t]);
      c.token_texts.push_back(out.token_text(t));
      if (req_.top_logprobs > 0) {
        std::vector<std::pair<std::string, float>> alternatives;
        if (t < out.top_logprobs().size()) {
          for (const auto& [id, lp] : out.top_logprobs()[t]) alternatives.emplace_back(out.id_text(id), lp);
        }
        c.top.push_back(std::move(alternatives));
      }
    }
  }
  return c;
}

void Connection::on_event(const TokenEvent& e) {
  const auto now = Clock::now();
  const int i = static_cast<int>(e.id - first_id_);
  if (i < 0 || i >= static_cast<int>(choices_.size())) return;
  Choice& ch = choices_[size_t(i)];
  if (e.token >= 0) {
    if (ch.output->tokens().empty()) {
      server_.metrics().observe_ttft(seconds(arrived_, now));
      server_.metrics().observe_first_token_parts(e.queued_s, e.prefill_s);
    } else server_.metrics().observe_inter_token(seconds(ch.last_token, now));
    ch.last_token = now;
    ch.output->add(e.token, e.logprob, e.top);
    server_.metrics().add_tokens(0, 1);
  }
  const bool first_chunk = ch.sent_tokens == 0;
  if (e.finished && !ch.done) {
    spdlog::debug("serve: request {} finished ({}) after {} tokens", e.id, e.finish_reason, ch.output->tokens().size());
    ch.done = true;
    ch.finish_reason = e.finish_reason;
    ++finished_;
    server_.unregister(e.id);
    server_.metrics().count_finish(e.finish_reason);
    if (finished_ == static_cast<int>(choices_.size())) {
      done_ = true;
      server_.metrics().observe_e2e(seconds(arrived_, now));
    }
  }
  if (cancelled_ || failed_ || closed()) return;
  const std::string reason = e.finished ? e.finish_reason : "";
  int64_t generated = 0;
  for (const Choice& c : choices_) generated += static_cast<int64_t>(c.output->tokens().size());
  const std::string stream_end =
      (req_.include_usage ? stream_usage_chunk(head_, req_.prompt_tokens(), generated) : "") + "data: [DONE]\n\n";
  if (reason == "cancelled" || reason == "error") {  // not asked for by this client
    const bool drained = reason[0] == 'c';  // the server cancels only when a drain outlasts its grace
    if (!req_.stream) {
      failed_ = true;
      cancel_unfinished();
      return drained ? error({503, "the server stopped before this request finished; retry elsewhere", "server_error",
                              "", "unavailable"})
                     : error({500, "the request failed in the engine", "server_error", "", ""});
    }
    // A stream says it was cut, as vLLM's do: finish_reason "abort" with
    // whatever text was held back, never a bare [DONE] that looks finished.
    std::string data = stream_chunk(head_, update(i, "abort"), req_, first_chunk);
    if (!done_) return respond(chunk(data), /*last=*/false);
    return respond(chunk(data + stream_end) + "0\r\n\r\n", /*last=*/true);
  }
  if (!req_.stream) {
    if (!done_) return;
    std::vector<ChoiceUpdate> all;
    for (int k = 0; k < static_cast<int>(choices_.size()); ++k) {
      all.push_back(update(k, choices_[size_t(k)].finish_reason));
    }
    return reply(200, "application/json",
                 dump_json(completion_json(head_, all, req_, req_.prompt_tokens(), generated)));
  }
  std::string data = stream_chunk(head_, update(i, reason), req_, first_chunk);
  if (done_) return respond(chunk(data + stream_end) + "0\r\n\r\n", /*last=*/true);
  respond(chunk(data), /*last=*/false);
}

void Connection::reply(int status, const std::string& type, const std::string& body) {
  server_.metrics().count_response(status);
  respond(http_core::response_text(status, type, body), /*last=*/true);
}

void Connection::respond(std::string data, bool last) {
  if (!responding_) responding_ = true, ++server_.responding_;
  if (last) return send_last(std::move(data));
  send(std::move(data));
}

}  // namespace

Result<std::unique_ptr<ServeHttp>> ServeHttp::start(ServeHttpOptions options, GenerationQueue* queue,
                                                    ServeMetrics* metrics) {
  auto server = std::make_unique<Server>(std::move(options), queue, metrics);
  COHORT_RETURN_IF_ERROR(server->open());
  return std::unique_ptr<ServeHttp>(std::move(server));
}

}  // namespace cohort::infer
