// NcclCommunicator: GPU collectives over NCCL. Built only when CMake found
// CUDA and NCCL (COHORT_HAVE_CUDA); link cohort_collective_nccl.
//
// Creation: a CPU communicator over the same ranks (the world from
// init_from_environment, Gloo or MPI) carries NCCL's unique id from rank 0
// to the others; then every rank joins with a non-blocking
// ncclCommInitRankConfig, polled against the timeout and aborted past it.
//
// Streams: the communicator owns one communication stream on its device.
// Each operation waits (by event) for the work already queued on the
// caller's stream (`options.stream`, nullptr: the legacy default stream),
// runs on the communication stream, and makes the caller's stream wait for
// it in turn, so code that stays on its stream needs no host wait. wait()
// blocks the host until the operation finished on the GPU, polling
// ncclCommGetAsyncError; past the timeout it calls ncclCommAbort, which
// releases every rank stuck in this communicator, and reports the
// operation, the group and the timeout.
//
// Buffers are device pointers on this communicator's device. Threading: as
// NCCL, issue from one thread; wait() from any.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/bootstrap.h"
#include "collective/communicator.h"

// ncclComm_t and cudaStream_t, without NCCL's and CUDA's headers.
struct ncclComm;
struct CUstream_st;

namespace cohort::collective {

struct NcclOptions {
  std::string name = "world";
  Milliseconds timeout{std::chrono::minutes(10)};
  int device = -1;  // CUDA device; -1: the device current on the calling thread
  // A blocking NCCL communicator: every call returns once NCCL enqueued its
  // work, on the calling thread, as CUDA stream capture needs (a
  // non-blocking one may finish a launch on a helper thread). Init then
  // cannot be bounded by `timeout`.
  bool blocking = false;
};

class NcclCommunicator final : public Communicator {
 public:
  // Every rank of `bootstrap` calls this; the NCCL ranks equal its ranks.
  static Result<std::unique_ptr<NcclCommunicator>> create(std::shared_ptr<Communicator> bootstrap,
                                                          const NcclOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return options_.name; }
  Device device() const override { return Device::kCuda; }
  Milliseconds timeout() const override { return options_.timeout; }
  int cuda_device() const { return device_; }
  // The communication stream (a cudaStream_t). An operation issued with
  // options.stream == stream() runs there with no cross-stream events.
  void* stream() const;

  std::shared_ptr<Work> all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                         const AllReduceOptions& options) override;
  std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                             DType dtype,
                                             const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> all_gather_async(const void* send, void* recv, size_t send_count,
                                         DType dtype, const AllGatherOptions& options) override;
  // One ncclBroadcast per rank inside a group.
  std::shared_ptr<Work> all_gather_v_async(const void* send, void* recv,
                                           const std::vector<size_t>& counts, DType dtype,
                                           const AllGatherOptions& options) override;
  std::shared_ptr<Work> all_to_all_v_async(const void* send, const std::vector<size_t>& send_counts,
                                           void* recv, const std::vector<size_t>& recv_counts,
                                           DType dtype, const AllToAllOptions& options) override;
  std::shared_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype,
                                        const BroadcastOptions& options) override;
  // NCCL point-to-point blocks until the peer posts its half: pair sends and
  // receives that depend on each other through send_recv_async.
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> send_recv_async(const void* send, size_t send_count, int dst, void* recv,
                                        size_t recv_count, int src, DType dtype,
                                        const SendRecvOptions& options) override;
  // A one-element all_reduce; wait() returns once every rank reached it.
  std::shared_ptr<Work> barrier_async(const BarrierOptions& options) override;
  // Splits the bootstrap communicator the same way, then builds a new NCCL
  // communicator over it (members only, like every split).
  Result<std::unique_ptr<Communicator>> split(const std::vector<int>& ranks,
                                              const SplitOptions& options) override;

  // Aborts the NCCL communicator now; every later operation fails.
  void abort(const Status& why);

  // Ok while operations can run: not aborted (a failed launch aborts) and
  // no asynchronous NCCL error. Makes no CUDA call, so it is safe during
  // stream capture: for code that issues operations on a stream and never
  // waits their Work on the host (CUDA graphs), polling this instead.
  Status async_error();

  struct State;  // the ncclComm_t, shared with pending Work

 private:
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, std::shared_ptr<State> state, int rank,
                   int size, int device, NcclOptions options);
  // Orders `body` (which enqueues NCCL calls on the communication stream)
  // after the caller's stream and before a completion event, which the
  // caller's stream waits for when `caller_waits` (else Work::wait_on_stream).
  using LaunchBody = std::function<Status(ncclComm* comm, CUstream_st* stream)>;
  std::shared_ptr<Work> launch(const std::string& op, Milliseconds requested_timeout, void* stream,
                               bool caller_waits, const LaunchBody& body);

  std::shared_ptr<Communicator> bootstrap_;
  std::shared_ptr<State> state_;
  int rank_;
  int size_;
  int device_;
  NcclOptions options_;
  void* barrier_buffer_ = nullptr;  // one int on the device
};

// The world's NCCL communicator, the usual way in for a worker:
//   auto world = init_from_environment();
//   auto nccl = init_nccl_world(*world);
// When options.device is -1 it picks the GPU: device 0 when the process sees
// one GPU (cohort's "own" visibility), else LOCAL_RANK modulo the visible
// count ("node" visibility, mpirun). The unique id travels over world.cpu
// (Gloo through the store, or MPI).
Result<std::unique_ptr<NcclCommunicator>> init_nccl_world(const World& world,
                                                          NcclOptions options = {});

}  // namespace cohort::collective
