// Communicator: the one interface through which workers talk to each other.
//
// Backends live in subfolders and share this interface: gloo/ (CPU memory,
// TCP, bootstrapped through a store), mpi/ (CPU memory, under mpirun/srun)
// and nccl/ (GPU memory). bootstrap.h picks the right one from the
// environment.
//
// Semantics follow NCCL's, whatever the backend:
//  - Every rank of the group calls every collective, in the same order, with
//    the same count, dtype and options (root, reduce op).
//  - Buffers are raw pointers to `count` elements of `dtype` in the
//    backend's memory (host for gloo/mpi, device for nccl). They must stay
//    valid until the operation's Work completes.
//  - In place: all_reduce with send == recv; reduce_scatter with
//    recv == send + rank * recv_count; all_gather with
//    send == recv + rank * send_count; all_gather_v with send at this rank's
//    offset in recv; broadcast is always in place; all_to_all_v never is
//    (send and recv must not overlap).
//  - kAvg divides the sum by the group size once, at the end (integers
//    truncate, as NCCL's average does).
//
// Asynchrony: each `*_async` call returns a Work at once; `wait()` blocks the
// host until the operation completed or its timeout passed. On GPU the
// operation runs on the communicator's own stream, after the work already
// queued on `stream` (the caller's), and `stream` waits for it: code that
// stays on its stream needs no host wait. With `overlap` set (all-reduce,
// reduce-scatter, all-gather) `stream` does not wait, so the caller's
// kernels run alongside the operation; the caller then orders what uses the
// result with `Work::wait()` or, without blocking the host,
// `Work::wait_on_stream(stream)`.
//
// Timeouts: every operation has one (its options' `timeout`, or the
// communicator's default when zero). A peer that died or never arrived makes
// the operation fail within it with an error naming the operation, the group
// and the timeout. A communicator that failed this way is broken: every later
// operation fails at once with kAborted.
//
// Errors never throw. Argument errors (bad peer, wrong counts) come back as
// kInvalidArgument from wait() and do not break the communicator.
//
// Threading: issue operations from one thread at a time (as with NCCL);
// wait() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/types.h"

namespace cohort::collective {

using Milliseconds = std::chrono::milliseconds;

using cohort::Device;  // base/dtype.h, shared with models/

// `stream` is a cudaStream_t for the nccl backend (nullptr: the default
// stream) and ignored elsewhere. `timeout` 0 means the communicator's own.
// `overlap`: see Asynchrony above.
struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Milliseconds timeout{0};
  void* stream = nullptr;
  bool overlap = false;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Milliseconds timeout{0};
  void* stream = nullptr;
  bool overlap = false;
};
struct AllGatherOptions {
  Milliseconds timeout{0};
  void* stream = nullptr;
  bool overlap = false;
};
struct AllToAllOptions {
  Milliseconds timeout{0};
  void* stream = nullptr;
};
struct BroadcastOptions {
  int root = 0;
  Milliseconds timeout{0};
  void* stream = nullptr;
};
struct SendRecvOptions {
  uint32_t tag = 0;  // matches a send to a recv between the same two ranks (gloo, mpi)
  Milliseconds timeout{0};
  void* stream = nullptr;
};
struct BarrierOptions {
  Milliseconds timeout{0};
};
struct SplitOptions {
  std::string name;  // empty: "<parent>/[r0,r1,...]"
  Milliseconds timeout{0};
};

// A pending operation. Destroying a Work does not cancel the operation; the
// buffers must still outlive it.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation is done or failed; returns the same Status
  // on every call.
  virtual Status wait() = 0;
  // True once wait() would return without blocking.
  virtual bool is_completed() = 0;
  // Makes `stream` (a cudaStream_t) wait for the operation without blocking
  // the host; for operations issued with `overlap`. Backends without
  // streams block the host instead, as wait() does.
  virtual Status wait_on_stream(void* stream) {
    (void)stream;
    return wait();
  }
};

// A Work that is already done: argument errors, empty operations.
std::shared_ptr<Work> completed_work(Status status);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in errors and logs: "world", "world/[0,2]", "tp0".
  virtual const std::string& name() const = 0;
  virtual Device device() const = 0;
  virtual Milliseconds timeout() const = 0;

  virtual std::shared_ptr<Work> all_reduce_async(const void* send, void* recv, size_t count,
                                                 DType dtype, const AllReduceOptions& options) = 0;
  // `send` holds size() * recv_count elements; this rank receives the
  // reduction of chunk rank().
  virtual std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv,
                                                     size_t recv_count, DType dtype,
                                                     const ReduceScatterOptions& options) = 0;
  // `recv` receives size() * send_count elements, rank r's at r * send_count.
  virtual std::shared_ptr<Work> all_gather_async(const void* send, void* recv, size_t send_count,
                                                 DType dtype, const AllGatherOptions& options) = 0;
  // Variable sizes: rank r contributes counts[r] elements (counts has size()
  // entries, the same on every rank); `recv` gets them back to back.
  virtual std::shared_ptr<Work> all_gather_v_async(const void* send, void* recv,
                                                   const std::vector<size_t>& counts, DType dtype,
                                                   const AllGatherOptions& options) = 0;
  // Variable all-to-all (tokens travelling to their experts' ranks): this
  // rank sends send_counts[p] elements to each rank p, the blocks back to
  // back in `send` in rank order, and receives recv_counts[p] elements from
  // each rank p, back to back in `recv` in rank order; its own block is
  // copied. Both lists have size() entries, and recv_counts[p] here must
  // equal send_counts[rank()] on rank p: exchange the counts first (an
  // all_gather of each rank's send_counts) where they are not known. A
  // mismatch is the caller's error; gloo and mpi report it or time out,
  // nccl does not detect it.
  virtual std::shared_ptr<Work> all_to_all_v_async(const void* send,
                                                   const std::vector<size_t>& send_counts,
                                                   void* recv,
                                                   const std::vector<size_t>& recv_counts,
                                                   DType dtype, const AllToAllOptions& options) = 0;
  virtual std::shared_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype,
                                                const BroadcastOptions& options) = 0;
  virtual std::shared_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer,
                                           const SendRecvOptions& options) = 0;
  virtual std::shared_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer,
                                           const SendRecvOptions& options) = 0;
  // A send to `dst` and a receive from `src` that progress together (a ring
  // step). The default posts both; NCCL overrides it with a group call,
  // without which two blocking sends deadlock.
  virtual std::shared_ptr<Work> send_recv_async(const void* send, size_t send_count, int dst,
                                                void* recv, size_t recv_count, int src, DType dtype,
                                                const SendRecvOptions& options);
  virtual std::shared_ptr<Work> barrier_async(const BarrierOptions& options) = 0;

  // A communicator over `ranks` (ranks of this group, in the new group's
  // rank order). Called by every member of `ranks`, and only by them, so that
  // each rank builds just its own data-parallel and tensor-parallel groups.
  // A rank outside `ranks` gets kInvalidArgument.
  virtual Result<std::unique_ptr<Communicator>> split(const std::vector<int>& ranks,
                                                      const SplitOptions& options) = 0;

  // Blocking forms: the async call followed by wait().
  Status all_reduce(const void* send, void* recv, size_t count, DType dtype,
                    const AllReduceOptions& options = {});
  Status all_reduce(void* buf, size_t count, DType dtype, const AllReduceOptions& options = {}) {
    return all_reduce(buf, buf, count, dtype, options);
  }
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                        const ReduceScatterOptions& options = {});
  Status all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                    const AllGatherOptions& options = {});
  Status all_gather_v(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                      const AllGatherOptions& options = {});
  Status all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                      const std::vector<size_t>& recv_counts, DType dtype,
                      const AllToAllOptions& options = {});
  Status broadcast(void* buf, size_t count, DType dtype, const BroadcastOptions& options = {});
  Status send(const void* buf, size_t count, DType dtype, int peer,
              const SendRecvOptions& options = {});
  Status recv(void* buf, size_t count, DType dtype, int peer, const SendRecvOptions& options = {});
  Status barrier(const BarrierOptions& options = {});

 protected:
  // The timeout an operation runs under.
  Milliseconds effective_timeout(Milliseconds requested) const {
    return requested.count() > 0 ? requested : timeout();
  }
  // "<op> on group '<name>' (rank r of n, timeout t ms) failed: <detail>",
  // keeping `cause`'s code.
  Status op_error(const std::string& op, Milliseconds timeout, const Status& cause) const;
  // Checks shared by every backend; ok or kInvalidArgument naming the op.
  Status check_peer(const std::string& op, int peer) const;
  Status check_buffers(const std::string& op, const void* a, const void* b, size_t count) const;
  // all_gather_v's arguments: one count per rank, buffers for them; sets
  // *total to the sum of the counts.
  Status check_all_gather_v(const void* send, const void* recv, const std::vector<size_t>& counts,
                            size_t* total) const;
  // all_to_all_v's arguments: one count per rank in each list, buffers for
  // them, no overlap; sets the totals sent and received.
  Status check_all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                            const void* recv, const std::vector<size_t>& recv_counts, DType dtype,
                            size_t* send_total, size_t* recv_total) const;
  Status check_split(const std::vector<int>& ranks, int* new_rank) const;
  // The name a split gets when SplitOptions::name is empty.
  std::string split_name(const std::vector<int>& ranks, const SplitOptions& options) const;
};

}  // namespace cohort::collective
