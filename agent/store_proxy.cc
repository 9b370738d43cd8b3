// StoreProxy: a StoreBackend that forwards to the coordinator.
#include "agent/store_proxy.h"

#include <charconv>
#include <map>
#include <mutex>

#include "collective/store/store_backend.h"
#include "collective/store/tcp_store.h"
#include "protocol/limits.h"

namespace cohort::agent {

namespace {
constexpr size_t kMaxProxyConnections = 64;
}  // namespace

class StoreProxy::Backend final : public store::StoreBackend,
                                  public std::enable_shared_from_this<StoreProxy::Backend> {
 public:
  Backend(std::string job_id, int attempt, StoreForward forward,
          std::function<void(const std::string&)> on_set, std::string token)
      : job_id_(std::move(job_id)), attempt_(attempt), forward_(std::move(forward)),
        on_set_(std::move(on_set)), token_(std::move(token)) {}

  void set(const std::string& key, std::string value, Done done) override {
    if (value.size() > protocol::kMaxStoreValueBytes) {
      return done(invalid_argument("store: a value of " + std::to_string(value.size()) +
                                   " bytes; at most " + std::to_string(protocol::kMaxStoreValueBytes)));
    }
    if (on_set_) on_set_(key);
    auto r = request("set", {key});
    r.value = std::move(value);
    call(std::move(r), [done](Result<protocol::StoreReply> reply) {
      done(reply ? Status::ok() : reply.status());
    });
  }

  void get(const std::string& key, store::Milliseconds timeout, ValueDone done) override {
    auto r = request("get", {key});
    r.timeout_ms = timeout.count();
    call(std::move(r), [done](Result<protocol::StoreReply> reply) {
      if (!reply) return done(reply.status());
      done(std::move(reply->value));
    });
  }

  void add(const std::string& key, int64_t delta, AddDone done) override {
    auto r = request("add", {key});
    r.delta = delta;
    call(std::move(r), [done](Result<protocol::StoreReply> reply) {
      if (!reply) return done(reply.status());
      int64_t value = 0;
      const std::string& t = reply->value;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
      if (ec != std::errc() || end != t.data() + t.size()) {
        return done(internal_error("store add returned '" + t + "', not an integer"));
      }
      done(value);
    });
  }

  void wait(std::vector<std::string> keys, store::Milliseconds timeout, Done done) override {
    auto r = request("wait", std::move(keys));
    r.timeout_ms = timeout.count();
    call(std::move(r), [done](Result<protocol::StoreReply> reply) {
      done(reply ? Status::ok() : reply.status());
    });
  }

  // Fails what is pending and refuses what comes after.
  void close() {
    std::map<uint64_t, Completion> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      pending.swap(pending_);
    }
    for (auto& [id, done] : pending) done(aborted("the job attempt ended"));
  }

 private:
  using Completion = std::function<void(Result<protocol::StoreReply>)>;

  protocol::StoreRequest request(const std::string& op, std::vector<std::string> keys) const {
    protocol::StoreRequest r;
    r.job_id = job_id_;
    r.attempt = attempt_;
    r.op = op;
    r.keys = std::move(keys);
    r.token = token_;
    return r;
  }

  void call(protocol::StoreRequest r, Completion done) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) {
        done(aborted("the job attempt ended"));
        return;
      }
      id = next_id_++;
      pending_[id] = std::move(done);
    }
    std::weak_ptr<Backend> self = shared_from_this();
    forward_(std::move(r), [self, id](Result<protocol::StoreReply> reply) {
      if (auto backend = self.lock()) backend->complete(id, std::move(reply));
    });
  }

  void complete(uint64_t id, Result<protocol::StoreReply> reply) {
    Completion done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // already failed by close()
      done = std::move(it->second);
      pending_.erase(it);
    }
    done(std::move(reply));
  }

  const std::string job_id_;
  const int attempt_;
  StoreForward forward_;
  std::function<void(const std::string&)> on_set_;
  const std::string token_;
  std::mutex mu_;
  bool closed_ = false;                      // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                     // GUARDED_BY(mu_)
  std::map<uint64_t, Completion> pending_;   // GUARDED_BY(mu_)
};

Result<std::unique_ptr<StoreProxy>> StoreProxy::start(const std::string& job_id, int attempt,
                                                      StoreForward forward,
                                                      const std::string& host,
                                                      std::function<void(const std::string&)> on_set,
                                                      const std::string& token) {
  std::unique_ptr<StoreProxy> proxy(new StoreProxy());
  proxy->backend_ =
      std::make_shared<Backend>(job_id, attempt, std::move(forward), std::move(on_set), token);
  store::TcpStoreServerOptions options;
  options.host = host;
  options.port = 0;
  options.token = token;
  // A node's workers need a few connections each; 500 idle ones had made
  // 507 threads.
  options.max_connections = kMaxProxyConnections;
  options.max_frame_bytes = uint32_t(protocol::kMaxStoreValueBytes + (64 << 10));
  COHORT_ASSIGN_OR_RETURN(proxy->server_, store::TcpStoreServer::start(proxy->backend_, options));
  return proxy;
}

StoreProxy::~StoreProxy() {
  if (backend_) backend_->close();
  server_.reset();
}

std::string StoreProxy::address() const { return server_->address(); }

}  // namespace cohort::agent
