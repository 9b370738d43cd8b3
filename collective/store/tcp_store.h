// TcpStoreServer and TcpStoreClient: the rendezvous store over TCP.
//
// The server is run by whoever bootstraps a job: the agent (through its own
// StoreBackend that forwards to the coordinator), rank 0 of a torchrun-style
// launch, or a test driver. Workers use TcpStoreClient. The protocol is in
// tcp_store_protocol.h.
//
// Threading: the server runs one accept thread and one thread per
// connection (a node's workers, or a test's ranks: tens, not thousands);
// threads of closed connections are joined as new ones arrive. Destroying
// the server waits for requests the backend has not answered yet, so a
// backend must complete (or fail) its pending calls on shutdown.
// The client serialises its requests on one socket; it is thread-safe, but a
// blocking get holds the connection until it is answered.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "collective/store/store.h"
#include "collective/store/store_backend.h"
#include "collective/store/tcp_store_protocol.h"

namespace cohort::store {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" or "" to listen on all addresses
  int port = 0;                    // 0: pick a free port (see port())
  // Connections beyond this are closed at once (each has a thread).
  size_t max_connections = 1024;
  // Requests larger than this get an error reply and the connection closes.
  uint32_t max_frame_bytes = wire::kMaxFrameBytes;
  // When set, each connection's first request must be AUTH with this token.
  std::string token;
};

class TcpStoreServer {
 public:
  // Listens and starts serving `backend`. Fails (kIo) when the port is taken.
  static Result<std::unique_ptr<TcpStoreServer>> start(std::shared_ptr<StoreBackend> backend,
                                                       const TcpStoreServerOptions& options);
  ~TcpStoreServer();  // stops: closes the listener and every connection

  int port() const { return port_; }
  // "tcp://host:port", the form COHORT_STORE takes.
  std::string address() const;

 private:
  TcpStoreServer(std::shared_ptr<StoreBackend> backend, const TcpStoreServerOptions& options,
                 int listen_fd, int port);
  void accept_loop();
  void serve(int fd);
  std::string handle(const std::string& request);

  TcpStoreServerOptions options_;

  std::shared_ptr<StoreBackend> backend_;
  std::string host_;
  int listen_fd_;
  int port_;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<int> connections_;        // GUARDED_BY(mu_)
  std::map<int, std::thread> workers_;  // GUARDED_BY(mu_), by connection fd
  std::vector<std::thread> finished_;   // GUARDED_BY(mu_), to be joined
  std::thread acceptor_;
};

struct TcpStoreClientOptions {
  // How long to keep retrying the first connection (the server may start
  // after the client).
  Milliseconds connect_timeout{std::chrono::seconds(60)};
  // Extra time allowed on top of a request's own timeout for the reply to
  // arrive, and the whole budget of set/add.
  Milliseconds io_timeout{std::chrono::seconds(60)};
  // Sent first (AUTH) when not empty: COHORT_STORE_TOKEN under cohort's launch.
  std::string token;
};

class TcpStoreClient final : public Store {
 public:
  static Result<std::unique_ptr<TcpStoreClient>> connect(const std::string& host, int port,
                                                         const TcpStoreClientOptions& options = {});
  ~TcpStoreClient() override;

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, Milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, Milliseconds timeout) override;

 private:
  TcpStoreClient(int fd, std::string endpoint, TcpStoreClientOptions options)
      : fd_(fd), endpoint_(std::move(endpoint)), options_(options) {}
  // Sends one request and returns the reply body after its status byte.
  Result<std::string> call(const std::string& request, Milliseconds op_timeout);

  std::mutex mu_;
  int fd_;  // GUARDED_BY(mu_)
  std::string endpoint_;
  TcpStoreClientOptions options_;
};

// Parses "tcp://host:port" (or "host:port"). IPv6 hosts go in brackets.
Status parse_tcp_address(const std::string& address, std::string* host, int* port);

}  // namespace cohort::store
