// GlooCommunicator: each collective maps onto Gloo's options-style API with
// our reduction function; reduce_scatter is an all_reduce into scratch space
// (Gloo's own reduce-scatter has no timeout and no custom reduction).
#include "collective/gloo/gloo_communicator.h"

#include <csignal>
#include <cstring>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "collective/gloo/gloo_op_queue.h"
#include "collective/gloo/gloo_self_mailbox.h"
#include "collective/gloo/gloo_store.h"

namespace cohort::collective {

namespace {

// Slots for send/recv, apart from the prefixes Gloo's collectives use
// (0x01..0x08 in the top byte).
constexpr uint64_t kP2pSlotPrefix = 0x40ull << 56;

std::shared_ptr<::gloo::transport::Device> make_device(const GlooOptions& options) {
  ::gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else {
    attr.hostname = options.hostname;
  }
  return ::gloo::transport::tcp::CreateDevice(attr);
}

// Runs a Gloo call, turning its exceptions into a Status.
template <typename F>
Status gloo_call(F&& f) {
  try {
    f();
    return Status::ok();
  } catch (const ::gloo::IoException& e) {
    std::string what = e.what();
    bool timed_out =
        what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
    return timed_out ? timeout_error(what) : unavailable(what);
  } catch (const std::exception& e) {
    return aborted(e.what());
  }
}

// Gloo sizes its segments by element; only the element size matters, the
// arithmetic is ours.
template <typename Options>
void set_output(Options& o, void* ptr, size_t count, DType dtype) {
  switch (dtype_size(dtype)) {
    case 1:
      return o.template setOutput<uint8_t>(static_cast<uint8_t*>(ptr), count);
    case 2:
      return o.template setOutput<uint16_t>(static_cast<uint16_t*>(ptr), count);
    case 4:
      return o.template setOutput<uint32_t>(static_cast<uint32_t*>(ptr), count);
    default:
      return o.template setOutput<uint64_t>(static_cast<uint64_t*>(ptr), count);
  }
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that dies mid-send
// would kill this process with SIGPIPE instead of failing the operation.
// Ignored only when nobody installed a handler.
void ignore_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

Result<std::unique_ptr<GlooCommunicator>> GlooCommunicator::create(
    std::shared_ptr<store::Store> store, int rank, int size, const GlooOptions& options) {
  ignore_sigpipe();
  return connect(std::move(store), rank, size, options, nullptr);
}

Result<std::unique_ptr<GlooCommunicator>> GlooCommunicator::connect(
    std::shared_ptr<store::Store> store, int rank, int size, const GlooOptions& options,
    std::shared_ptr<::gloo::transport::Device> device) {
  if (size < 1 || rank < 0 || rank >= size) {
    return invalid_argument("gloo group '" + options.name + "': rank " + std::to_string(rank) +
                            " of size " + std::to_string(size) + " is out of range");
  }
  auto scoped = std::make_shared<store::PrefixStore>(store, "gloo/" + options.name);
  std::shared_ptr<::gloo::rendezvous::Context> context;
  Status s = gloo_call([&] {
    if (device == nullptr) device = make_device(options);
    context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options.timeout);
    GlooStore gloo_store(scoped, options.timeout);
    context->connectFullMesh(gloo_store, device);
  });
  if (!s.is_ok()) {
    return Status(s.code(), "connecting gloo group '" + options.name + "' (rank " +
                                std::to_string(rank) + " of " + std::to_string(size) +
                                ", timeout " + std::to_string(options.timeout.count()) +
                                " ms): " + s.message());
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(scoped, rank, size, options, std::move(device), std::move(context)));
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<store::Store> store, int rank, int size,
                                   GlooOptions options,
                                   std::shared_ptr<::gloo::transport::Device> device,
                                   std::shared_ptr<::gloo::Context> context)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      device_(std::move(device)),
      context_(std::move(context)),
      failure_(std::make_shared<GlooFailure>()),
      queue_(std::make_unique<GlooOpQueue>()),
      self_(std::make_unique<GlooSelfMailbox>()) {}

GlooCommunicator::~GlooCommunicator() {
  queue_.reset();  // joins the worker before the context goes
}

std::shared_ptr<Work> GlooCommunicator::enqueue(std::string op, Milliseconds timeout,
                                                std::function<void()> body) {
  // `this` outlives the task: the destructor stops the queue first.
  return queue_->push([this, op = std::move(op), timeout, body = std::move(body)]() {
    Status broken = failure_->get();
    if (!broken.is_ok()) return op_error(op, timeout, broken);
    Status s = gloo_call(body);
    if (s.is_ok()) return s;
    failure_->mark(op_error(op, timeout, s));
    return op_error(op, timeout, s);
  });
}

std::shared_ptr<Work> GlooCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                         DType dtype,
                                                         const AllReduceOptions& options) {
  Status s = check_buffers("all_reduce", send, recv, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  ReduceOp op = options.op;
  return enqueue("all_reduce", timeout, [=, this] {
    if (send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
    if (size_ > 1) {
      ::gloo::AllreduceOptions o(context_);
      set_output(o, recv, count, dtype);
      o.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
        reduce_cpu(dtype, op, out, a, b, n);
      });
      o.setTimeout(timeout);
      ::gloo::allreduce(o);
    }
    if (op == ReduceOp::kAvg) divide_cpu(dtype, recv, count, size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                             size_t recv_count, DType dtype,
                                                             const ReduceScatterOptions& options) {
  Status s = check_buffers("reduce_scatter", send, recv, recv_count);
  if (!s.is_ok() || recv_count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  ReduceOp op = options.op;
  return enqueue("reduce_scatter", timeout, [=, this] {
    size_t chunk = recv_count * dtype_size(dtype);
    std::vector<char> scratch(static_cast<const char*>(send),
                              static_cast<const char*>(send) + chunk * size_);
    if (size_ > 1) {
      ::gloo::AllreduceOptions o(context_);
      set_output(o, scratch.data(), recv_count * size_, dtype);
      o.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
        reduce_cpu(dtype, op, out, a, b, n);
      });
      o.setTimeout(timeout);
      ::gloo::allreduce(o);
    }
    std::memcpy(recv, scratch.data() + chunk * rank_, chunk);
    if (op == ReduceOp::kAvg) divide_cpu(dtype, recv, recv_count, size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::all_gather_async(const void* send, void* recv,
                                                         size_t send_count, DType dtype,
                                                         const AllGatherOptions& options) {
  Status s = check_buffers("all_gather", send, recv, send_count);
  if (!s.is_ok() || send_count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  return enqueue("all_gather", timeout, [=, this] {
    size_t bytes = send_count * dtype_size(dtype);
    auto* out = static_cast<uint8_t*>(recv);
    if (send != out + bytes * rank_) std::memcpy(out + bytes * rank_, send, bytes);
    if (size_ == 1) return;
    ::gloo::AllgatherOptions o(context_);
    // In place: Gloo reads this rank's chunk from the output.
    o.setOutput(out, bytes * size_);
    o.setTimeout(timeout);
    ::gloo::allgather(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::all_gather_v_async(const void* send, void* recv,
                                                           const std::vector<size_t>& counts,
                                                           DType dtype,
                                                           const AllGatherOptions& options) {
  size_t total = 0;
  Status s = check_all_gather_v(send, recv, counts, &total);
  if (!s.is_ok() || total == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  return enqueue("all_gather_v", timeout, [=, this] {
    size_t esize = dtype_size(dtype);
    std::vector<size_t> bytes(counts.size());
    for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * esize;
    auto* out = static_cast<uint8_t*>(recv);
    // A private copy of the input: Gloo must not read what it is writing.
    std::vector<uint8_t> input(static_cast<const uint8_t*>(send),
                               static_cast<const uint8_t*>(send) + bytes[rank_]);
    if (size_ == 1) {
      std::memcpy(out, input.data(), input.size());
      return;
    }
    ::gloo::AllgathervOptions o(context_);
    o.setInput(input.data(), input.size());
    o.setOutput(out, bytes);
    o.setTimeout(timeout);
    ::gloo::allgatherv(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::all_to_all_v_async(const void* send,
                                                           const std::vector<size_t>& send_counts,
                                                           void* recv,
                                                           const std::vector<size_t>& recv_counts,
                                                           DType dtype,
                                                           const AllToAllOptions& options) {
  size_t send_total = 0, recv_total = 0;
  Status s = check_all_to_all_v(send, send_counts, recv, recv_counts, dtype, &send_total, &recv_total);
  if (!s.is_ok() || (send_total == 0 && recv_total == 0)) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  return enqueue("all_to_all_v", timeout, [=, this] {
    // Gloo counts elements of one byte: only the sizes matter.
    const size_t esize = dtype_size(dtype);
    std::vector<int64_t> in_bytes(size_), out_bytes(size_);
    for (int p = 0; p < size_; ++p) {
      in_bytes[p] = static_cast<int64_t>(send_counts[p] * esize);
      out_bytes[p] = static_cast<int64_t>(recv_counts[p] * esize);
    }
    // Empty sides still need an address for Gloo's buffers.
    uint8_t none = 0;
    auto* in = send_total ? static_cast<uint8_t*>(const_cast<void*>(send)) : &none;
    auto* out = recv_total ? static_cast<uint8_t*>(recv) : &none;
    if (size_ == 1) {
      std::memcpy(out, in, static_cast<size_t>(in_bytes[0]));
      return;
    }
    ::gloo::AlltoallvOptions o(context_);
    o.setInput(in, in_bytes);
    o.setOutput(out, out_bytes);
    o.setTimeout(timeout);
    ::gloo::alltoallv(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::broadcast_async(void* buf, size_t count, DType dtype,
                                                        const BroadcastOptions& options) {
  Status s = check_peer("broadcast", options.root);
  if (s.is_ok()) s = check_buffers("broadcast", buf, buf, count);
  if (!s.is_ok() || count == 0 || size_ == 1) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  int root = options.root;
  return enqueue("broadcast", timeout, [=, this] {
    ::gloo::BroadcastOptions o(context_);
    o.setOutput(static_cast<uint8_t*>(buf), count * dtype_size(dtype));
    o.setRoot(root);
    o.setTimeout(timeout);
    ::gloo::broadcast(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::barrier_async(const BarrierOptions& options) {
  auto timeout = effective_timeout(options.timeout);
  return enqueue("barrier", timeout, [=, this] {
    if (size_ == 1) return;
    ::gloo::BarrierOptions o(context_);
    o.setTimeout(timeout);
    ::gloo::barrier(o);
  });
}

namespace {

// A send or receive posted to Gloo; wait() waits on its unbound buffer.
class GlooP2pWork final : public Work {
 public:
  GlooP2pWork(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, bool is_send,
              Milliseconds timeout, std::function<Status(const Status&)> on_error)
      : buffer_(std::move(buffer)),
        is_send_(is_send),
        timeout_(timeout),
        on_error_(std::move(on_error)) {}

  Status wait() override {
    std::lock_guard lock(mu_);
    if (done_) return status_;
    Status s = gloo_call([&] {
      bool ok = is_send_ ? buffer_->waitSend(timeout_) : buffer_->waitRecv(timeout_);
      if (!ok) throw ::gloo::IoException("aborted");
    });
    status_ = s.is_ok() ? s : on_error_(s);
    done_ = true;
    return status_;
  }
  // Gloo cannot be asked without waiting; true once wait() has returned.
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
  bool is_send_;
  Milliseconds timeout_;
  std::function<Status(const Status&)> on_error_;
  bool done_ = false;  // GUARDED_BY(mu_)
  Status status_;      // GUARDED_BY(mu_)
};

}  // namespace

std::function<Status(const Status&)> GlooCommunicator::p2p_error(const std::string& op,
                                                                 Milliseconds timeout) {
  // Text and the shared failure flag only: the Work may outlive `this`.
  std::string prefix = op_error(op, timeout, internal_error("")).message();
  return [prefix, failure = failure_](const Status& cause) {
    Status s(cause.code(), prefix + cause.message());
    failure->mark(s);
    return s;
  };
}

std::shared_ptr<Work> GlooCommunicator::send_async(const void* buf, size_t count, DType dtype,
                                                   int peer, const SendRecvOptions& options) {
  std::string op = "send to rank " + std::to_string(peer);
  Status s = check_peer(op, peer);
  if (s.is_ok()) s = check_buffers(op, buf, buf, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  if (peer == rank_) {
    auto work = self_->send(buf, count * dtype_size(dtype), options.tag);
    work->set_deadline(std::chrono::steady_clock::now() + timeout,
                       op_error(op, timeout, timeout_error("no matching recv on this rank")));
    return work;
  }
  Status broken = failure_->get();
  if (!broken.is_ok()) return completed_work(op_error(op, timeout, broken));
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
  s = gloo_call([&] {
    buffer = context_->createUnboundBuffer(const_cast<void*>(buf), count * dtype_size(dtype));
    buffer->send(peer, kP2pSlotPrefix | options.tag);
  });
  if (!s.is_ok()) return completed_work(op_error(op, timeout, s));
  return std::make_shared<GlooP2pWork>(std::move(buffer), true, timeout, p2p_error(op, timeout));
}

std::shared_ptr<Work> GlooCommunicator::recv_async(void* buf, size_t count, DType dtype, int peer,
                                                   const SendRecvOptions& options) {
  std::string op = "recv from rank " + std::to_string(peer);
  Status s = check_peer(op, peer);
  if (s.is_ok()) s = check_buffers(op, buf, buf, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  if (peer == rank_) {
    auto work = self_->recv(buf, count * dtype_size(dtype), options.tag);
    work->set_deadline(std::chrono::steady_clock::now() + timeout,
                       op_error(op, timeout, timeout_error("no matching send on this rank")));
    return work;
  }
  Status broken = failure_->get();
  if (!broken.is_ok()) return completed_work(op_error(op, timeout, broken));
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
  s = gloo_call([&] {
    buffer = context_->createUnboundBuffer(buf, count * dtype_size(dtype));
    buffer->recv(peer, kP2pSlotPrefix | options.tag);
  });
  if (!s.is_ok()) return completed_work(op_error(op, timeout, s));
  return std::make_shared<GlooP2pWork>(std::move(buffer), false, timeout, p2p_error(op, timeout));
}

Result<std::unique_ptr<Communicator>> GlooCommunicator::split(const std::vector<int>& ranks,
                                                              const SplitOptions& options) {
  int new_rank = -1;
  COHORT_RETURN_IF_ERROR(check_split(ranks, &new_rank));
  // Members agree on the namespace without talking: the rank list and how
  // many times this list was split before (every member counts the same).
  std::string list;
  for (int r : ranks) {
    if (!list.empty()) list += ',';
    list += std::to_string(r);
  }
  int generation = split_counts_[ranks]++;
  auto scoped = std::make_shared<store::PrefixStore>(
      store_, "split/" + list + "/" + std::to_string(generation));
  GlooOptions sub = options_;
  sub.name = split_name(ranks, options);
  sub.timeout = effective_timeout(options.timeout);
  // The new group shares this one's transport device (its listening socket
  // and event loop); only the pairs are new.
  COHORT_ASSIGN_OR_RETURN(auto comm,
                          connect(scoped, new_rank, static_cast<int>(ranks.size()), sub, device_));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace cohort::collective
