// GlooCommunicator: CPU collectives over Gloo's TCP transport.
//
// Ranks find each other through a Store (each publishes its listening
// address, then every pair connects: Gloo's full mesh). Collectives run one
// at a time, in issue order, on a thread owned by the communicator, so
// *_async returns at once; send/recv are posted straight to Gloo from the
// calling thread, so that a ring of sends and receives cannot deadlock
// behind a queued collective.
//
// Reductions go through cohort's own element functions (types.h): Gloo has
// no bf16, and its f16 sums are not rounded the way ours are.
//
// Creating one ignores SIGPIPE process-wide (unless a handler is installed):
// Gloo writes to sockets without MSG_NOSIGNAL, and a dead peer must fail an
// operation, not kill the process.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/store/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace cohort::collective {

struct GlooOptions {
  std::string name = "world";
  Milliseconds timeout{std::chrono::minutes(10)};
  // Where this rank listens for its peers: a network interface name (wins
  // when set, like GLOO_SOCKET_IFNAME) or a host name / address.
  std::string iface;
  std::string hostname = "127.0.0.1";
};

class GlooFailure;
class GlooOpQueue;
class GlooSelfMailbox;

class GlooCommunicator final : public Communicator {
 public:
  // Connects `size` ranks through `store` (keys go under "gloo/<name>/").
  // Fails within options.timeout if a rank never arrives.
  static Result<std::unique_ptr<GlooCommunicator>> create(std::shared_ptr<store::Store> store,
                                                          int rank, int size,
                                                          const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return options_.name; }
  Device device() const override { return Device::kCpu; }
  Milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                         const AllReduceOptions& options) override;
  std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                             DType dtype,
                                             const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> all_gather_async(const void* send, void* recv, size_t send_count,
                                         DType dtype, const AllGatherOptions& options) override;
  std::shared_ptr<Work> all_gather_v_async(const void* send, void* recv,
                                           const std::vector<size_t>& counts, DType dtype,
                                           const AllGatherOptions& options) override;
  std::shared_ptr<Work> all_to_all_v_async(const void* send, const std::vector<size_t>& send_counts,
                                           void* recv, const std::vector<size_t>& recv_counts,
                                           DType dtype, const AllToAllOptions& options) override;
  std::shared_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype,
                                        const BroadcastOptions& options) override;
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> barrier_async(const BarrierOptions& options) override;
  Result<std::unique_ptr<Communicator>> split(const std::vector<int>& ranks,
                                              const SplitOptions& options) override;

 private:
  GlooCommunicator(std::shared_ptr<store::Store> store, int rank, int size, GlooOptions options,
                   std::shared_ptr<::gloo::transport::Device> device,
                   std::shared_ptr<::gloo::Context> context);
  static Result<std::unique_ptr<GlooCommunicator>> connect(
      std::shared_ptr<store::Store> store, int rank, int size, const GlooOptions& options,
      std::shared_ptr<::gloo::transport::Device> device);  // null: a new device
  // How a failed send/recv reports itself and breaks the communicator.
  std::function<Status(const Status&)> p2p_error(const std::string& op, Milliseconds timeout);
  // Queues `body` (which may throw Gloo's exceptions) as operation `op`.
  std::shared_ptr<Work> enqueue(std::string op, Milliseconds timeout, std::function<void()> body);

  std::shared_ptr<store::Store> store_;  // this communicator's namespace
  int rank_;
  int size_;
  GlooOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> context_;
  std::shared_ptr<GlooFailure> failure_;
  std::unique_ptr<GlooOpQueue> queue_;
  std::unique_ptr<GlooSelfMailbox> self_;
  std::map<std::vector<int>, int> split_counts_;  // issuing thread only
};

}  // namespace cohort::collective
