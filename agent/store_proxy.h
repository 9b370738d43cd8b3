// StoreProxy: the rendezvous store as a node's workers see it.
//
// Workers connect to COHORT_STORE, a TcpStoreServer on the agent (loopback),
// so they need no cluster address and no CURVE keys. Each request is
// forwarded to the coordinator's store in the namespace of the worker's job
// attempt: one proxy per attempt on the node, so a rank of attempt 3 cannot
// read the keys of attempt 2.
//
// Bounded: at most kMaxProxyConnections connections (one thread each), and
// frames are refused by their announced size before anything is allocated.
//
// Threading: requests arrive on the server's connection threads; `forward`
// must be callable from any thread and must complete each request exactly
// once. Destroying the proxy first fails every request still waiting
// (kAborted), then stops the server, so no connection thread is left
// waiting on the agent's loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "protocol/messages.h"

namespace cohort::store {
class TcpStoreServer;
}

namespace cohort::agent {

using StoreForward = std::function<void(protocol::StoreRequest,
                                        std::function<void(Result<protocol::StoreReply>)>)>;

class StoreProxy {
 public:
  // `on_set`, when given, sees every key a worker sets (from a server
  // thread), before the set is forwarded: the supervisor's progress hook.
  // `token`: the attempt's store token; workers must present it (AUTH) and
  // it goes with every forwarded request. Values above kMaxStoreValueBytes
  // are refused here, with an error the worker sees at once.
  static Result<std::unique_ptr<StoreProxy>> start(
      const std::string& job_id, int attempt, StoreForward forward,
      const std::string& host = "127.0.0.1",
      std::function<void(const std::string& key)> on_set = nullptr, const std::string& token = "");
  ~StoreProxy();
  std::string address() const;  // "tcp://127.0.0.1:PORT": COHORT_STORE

 private:
  class Backend;
  StoreProxy() = default;
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<store::TcpStoreServer> server_;
};

}  // namespace cohort::agent
