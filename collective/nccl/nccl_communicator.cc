// NcclCommunicator: non-blocking NCCL with event ordering, host waits that
// poll for asynchronous errors, and ncclCommAbort past the timeout.
#include "collective/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace cohort::collective {

namespace {

Status cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cudaGetErrorString(e));
}
Status nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + ncclGetErrorString(r));
}

#define COHORT_CUDA_CHECK(call)                                     \
  do {                                                              \
    cudaError_t cohort_cuda_e_ = (call);                            \
    if (cohort_cuda_e_ != cudaSuccess)                              \
      return cuda_error(cohort_cuda_e_, #call, __FILE__, __LINE__); \
  } while (0)

// ncclInProgress is not a failure on a non-blocking communicator: the call
// finishes in the background and wait_ready() waits for it.
#define COHORT_NCCL_CHECK(call)                                            \
  do {                                                                     \
    ncclResult_t cohort_nccl_r_ = (call);                                  \
    if (cohort_nccl_r_ != ncclSuccess && cohort_nccl_r_ != ncclInProgress) \
      return nccl_error(cohort_nccl_r_, #call, __FILE__, __LINE__);        \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

using Clock = std::chrono::steady_clock;

}  // namespace

struct NcclCommunicator::State {
  std::mutex mu;
  ncclComm_t comm = nullptr;  // GUARDED_BY(mu); null once aborted
  Status broken;              // GUARDED_BY(mu)
  cudaStream_t stream = nullptr;

  // Polls until the communicator has no call in progress.
  Status wait_ready(Clock::time_point deadline, const char* what) {
    for (;;) {
      ncclResult_t r;
      {
        std::lock_guard lock(mu);
        if (comm == nullptr) return broken;
        COHORT_NCCL_CHECK(ncclCommGetAsyncError(comm, &r));
      }
      if (r == ncclSuccess) return Status::ok();
      if (r != ncclInProgress) return nccl_error(r, what, __FILE__, __LINE__);
      if (Clock::now() >= deadline)
        return timeout_error(std::string(what) + " did not finish in time");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void abort(const Status& why) {
    std::lock_guard lock(mu);
    if (broken.is_ok()) broken = aborted("communicator was aborted: " + why.message());
    if (comm != nullptr) {
      ncclCommAbort(comm);  // releases the kernels of every rank stuck with us
      comm = nullptr;
    }
  }
  Status get_broken() {
    std::lock_guard lock(mu);
    return broken;
  }
};

namespace {

// An operation's completion event; wait() polls it and the communicator's
// asynchronous error until done, failed, or past the deadline.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::State> state, cudaEvent_t done,
           Clock::time_point deadline, Status on_timeout,
           std::function<Status(const Status&)> context)
      : state_(std::move(state)),
        done_event_(done),
        deadline_(deadline),
        on_timeout_(std::move(on_timeout)),
        context_(std::move(context)) {}
  ~NcclWork() override { cudaEventDestroy(done_event_); }

  Status wait() override {
    std::lock_guard lock(mu_);
    while (!finished_) {
      if (poll_locked()) break;
      if (Clock::now() >= deadline_) {
        state_->abort(on_timeout_);
        finish_locked(on_timeout_);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return status_;
  }
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return finished_ || poll_locked();
  }

 private:
  bool poll_locked() {
    cudaError_t e = cudaEventQuery(done_event_);
    if (e == cudaSuccess) return finish_locked(Status::ok());
    if (e != cudaErrorNotReady)
      return finish_locked(context_(cuda_error(e, "cudaEventQuery", __FILE__, __LINE__)));
    ncclResult_t r = ncclSuccess;
    {
      std::lock_guard lock(state_->mu);
      if (state_->comm == nullptr) return finish_locked(context_(state_->broken));
      ncclCommGetAsyncError(state_->comm, &r);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      Status s = context_(nccl_error(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
      state_->abort(s);
      return finish_locked(s);
    }
    return false;
  }
  bool finish_locked(Status s) {
    status_ = std::move(s);
    finished_ = true;
    return true;
  }

  std::mutex mu_;
  std::shared_ptr<NcclCommunicator::State> state_;
  cudaEvent_t done_event_;
  Clock::time_point deadline_;
  Status on_timeout_;
  std::function<Status(const Status&)> context_;
  bool finished_ = false;  // GUARDED_BY(mu_)
  Status status_;          // GUARDED_BY(mu_)
};

}  // namespace

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(
    std::shared_ptr<Communicator> bootstrap, const NcclOptions& options) {
  int device = options.device;
  if (device < 0) COHORT_CUDA_CHECK(cudaGetDevice(&device));
  COHORT_CUDA_CHECK(cudaSetDevice(device));
  int rank = bootstrap->rank(), size = bootstrap->size();
  auto deadline = Clock::now() + options.timeout;
  std::string where = "creating NCCL group '" + options.name + "' (rank " + std::to_string(rank) +
                      " of " + std::to_string(size) + ", timeout " +
                      std::to_string(options.timeout.count()) + " ms)";

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) COHORT_NCCL_CHECK(ncclGetUniqueId(&id));
  BroadcastOptions bo;
  bo.root = 0;
  bo.timeout = options.timeout;
  COHORT_RETURN_IF_ERROR(bootstrap->broadcast(&id, sizeof(id), DType::kU8, bo).with_context(where));

  auto state = std::make_shared<State>();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer cannot hang init past the timeout
  ncclResult_t init = ncclCommInitRankConfig(&state->comm, size, id, rank, &config);
  Status ready = init == ncclSuccess || init == ncclInProgress
                     ? state->wait_ready(deadline, "ncclCommInitRankConfig")
                     : nccl_error(init, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (!ready.is_ok()) {
    state->abort(ready);
    return Status(ready.code(), where + ": " + ready.message());
  }
  // From here the destructor releases whatever was made.
  auto comm = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(bootstrap), state, rank, size, device, options));
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  COHORT_CUDA_CHECK(cudaMalloc(&comm->barrier_buffer_, sizeof(int)));
  COHORT_CUDA_CHECK(cudaMemset(comm->barrier_buffer_, 0, sizeof(int)));
  return comm;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> bootstrap,
                                   std::shared_ptr<State> state, int rank, int size, int device,
                                   NcclOptions options)
    : bootstrap_(std::move(bootstrap)),
      state_(std::move(state)),
      rank_(rank),
      size_(size),
      device_(device),
      options_(std::move(options)) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  // Flush what was issued, but never wait on a dead peer for longer than an
  // operation would: past the timeout, abort.
  ncclResult_t r = ncclSuccess;
  {
    std::lock_guard lock(state_->mu);
    if (state_->comm != nullptr) r = ncclCommFinalize(state_->comm);
  }
  Status s = r == ncclSuccess || r == ncclInProgress
                 ? state_->wait_ready(Clock::now() + options_.timeout, "ncclCommFinalize")
                 : nccl_error(r, "ncclCommFinalize", __FILE__, __LINE__);
  {
    std::lock_guard lock(state_->mu);
    if (state_->comm != nullptr) {
      if (s.is_ok()) {
        ncclCommDestroy(state_->comm);
      } else {
        ncclCommAbort(state_->comm);
      }
      state_->comm = nullptr;
    }
  }
  if (barrier_buffer_ != nullptr) cudaFree(barrier_buffer_);
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

void* NcclCommunicator::stream() const {
  return state_->stream;
}

void NcclCommunicator::abort(const Status& why) {
  state_->abort(why);
}

template <typename Body>
std::shared_ptr<Work> NcclCommunicator::launch(const std::string& op,
                                               Milliseconds requested_timeout, void* stream,
                                               Body&& body) {
  auto timeout = effective_timeout(requested_timeout);
  // Captures text, not `this`: a Work may outlive its communicator.
  std::string prefix = op_error(op, timeout, internal_error("")).message();
  auto context = [prefix](const Status& s) { return Status(s.code(), prefix + s.message()); };
  auto fail = [&](const Status& s) {
    state_->abort(s);
    return completed_work(context(s));
  };
  Status broken = state_->get_broken();
  if (!broken.is_ok()) return completed_work(context(broken));
  auto deadline = Clock::now() + timeout;
  auto caller = static_cast<cudaStream_t>(stream);
  cudaEvent_t ready = nullptr, done = nullptr;
  auto order = [&]() -> Status {
    COHORT_CUDA_CHECK(cudaSetDevice(device_));
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    COHORT_CUDA_CHECK(cudaEventRecord(ready, caller));
    COHORT_CUDA_CHECK(cudaStreamWaitEvent(state_->stream, ready, 0));
    {
      std::lock_guard lock(state_->mu);
      if (state_->comm == nullptr) return state_->broken;
      COHORT_RETURN_IF_ERROR(body(state_->comm, state_->stream));
    }
    COHORT_RETURN_IF_ERROR(state_->wait_ready(deadline, op.c_str()));
    COHORT_CUDA_CHECK(cudaEventRecord(done, state_->stream));
    COHORT_CUDA_CHECK(cudaStreamWaitEvent(caller, done, 0));
    return Status::ok();
  };
  Status s = order();
  if (ready != nullptr) cudaEventDestroy(ready);  // safe: destroyed once the GPU is past it
  if (!s.is_ok()) {
    if (done != nullptr) cudaEventDestroy(done);
    return fail(s);
  }
  Status on_timeout = context(timeout_error(
      "not complete on the GPU within the timeout: a peer died, hangs, or called a different "
      "operation; ncclCommAbort was called"));
  return std::make_shared<NcclWork>(state_, done, deadline, std::move(on_timeout), context);
}

std::shared_ptr<Work> NcclCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                         DType dtype,
                                                         const AllReduceOptions& options) {
  Status s = check_buffers("all_reduce", send, recv, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  return launch(
      "all_reduce", options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
        COHORT_NCCL_CHECK(
            ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(options.op), comm, stream));
        return Status::ok();
      });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                             size_t recv_count, DType dtype,
                                                             const ReduceScatterOptions& options) {
  Status s = check_buffers("reduce_scatter", send, recv, recv_count);
  if (!s.is_ok() || recv_count == 0) return completed_work(s);
  return launch("reduce_scatter", options.timeout, options.stream,
                [&](ncclComm_t comm, cudaStream_t stream) {
                  COHORT_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype),
                                                      nccl_op(options.op), comm, stream));
                  return Status::ok();
                });
}

std::shared_ptr<Work> NcclCommunicator::all_gather_async(const void* send, void* recv,
                                                         size_t send_count, DType dtype,
                                                         const AllGatherOptions& options) {
  Status s = check_buffers("all_gather", send, recv, send_count);
  if (!s.is_ok() || send_count == 0) return completed_work(s);
  return launch(
      "all_gather", options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
        COHORT_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm, stream));
        return Status::ok();
      });
}

std::shared_ptr<Work> NcclCommunicator::all_gather_v_async(const void* send, void* recv,
                                                           const std::vector<size_t>& counts,
                                                           DType dtype,
                                                           const AllGatherOptions& options) {
  Status s = check_counts("all_gather_v", counts);
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (s.is_ok()) s = check_buffers("all_gather_v", counts[rank_] > 0 ? send : recv, recv, total);
  if (!s.is_ok() || total == 0) return completed_work(s);
  return launch(
      "all_gather_v", options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
        size_t esize = dtype_size(dtype);
        char* out = static_cast<char*>(recv);
        COHORT_NCCL_CHECK(ncclGroupStart());
        size_t offset = 0;
        for (int r = 0; r < size_; ++r) {
          if (counts[r] > 0) {
            const void* src = r == rank_ ? send : out + offset;
            COHORT_NCCL_CHECK(
                ncclBroadcast(src, out + offset, counts[r], nccl_type(dtype), r, comm, stream));
          }
          offset += counts[r] * esize;
        }
        COHORT_NCCL_CHECK(ncclGroupEnd());
        return Status::ok();
      });
}

std::shared_ptr<Work> NcclCommunicator::broadcast_async(void* buf, size_t count, DType dtype,
                                                        const BroadcastOptions& options) {
  Status s = check_peer("broadcast", options.root);
  if (s.is_ok()) s = check_buffers("broadcast", buf, buf, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  return launch("broadcast", options.timeout, options.stream,
                [&](ncclComm_t comm, cudaStream_t stream) {
                  COHORT_NCCL_CHECK(
                      ncclBroadcast(buf, buf, count, nccl_type(dtype), options.root, comm, stream));
                  return Status::ok();
                });
}

std::shared_ptr<Work> NcclCommunicator::send_async(const void* buf, size_t count, DType dtype,
                                                   int peer, const SendRecvOptions& options) {
  std::string op = "send to rank " + std::to_string(peer);
  Status s = check_peer(op, peer);
  if (s.is_ok()) s = check_buffers(op, buf, buf, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  return launch(op, options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
    COHORT_NCCL_CHECK(ncclSend(buf, count, nccl_type(dtype), peer, comm, stream));
    return Status::ok();
  });
}

std::shared_ptr<Work> NcclCommunicator::recv_async(void* buf, size_t count, DType dtype, int peer,
                                                   const SendRecvOptions& options) {
  std::string op = "recv from rank " + std::to_string(peer);
  Status s = check_peer(op, peer);
  if (s.is_ok()) s = check_buffers(op, buf, buf, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  return launch(op, options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
    COHORT_NCCL_CHECK(ncclRecv(buf, count, nccl_type(dtype), peer, comm, stream));
    return Status::ok();
  });
}

std::shared_ptr<Work> NcclCommunicator::send_recv_async(const void* send, size_t send_count,
                                                        int dst, void* recv, size_t recv_count,
                                                        int src, DType dtype,
                                                        const SendRecvOptions& options) {
  std::string op =
      "send_recv (to rank " + std::to_string(dst) + ", from rank " + std::to_string(src) + ")";
  Status s = check_peer(op, dst);
  if (s.is_ok()) s = check_peer(op, src);
  if (s.is_ok()) s = check_buffers(op, send, send, send_count);
  if (s.is_ok()) s = check_buffers(op, recv, recv, recv_count);
  if (!s.is_ok() || (send_count == 0 && recv_count == 0)) return completed_work(s);
  return launch(op, options.timeout, options.stream, [&](ncclComm_t comm, cudaStream_t stream) {
    COHORT_NCCL_CHECK(ncclGroupStart());
    if (send_count > 0)
      COHORT_NCCL_CHECK(ncclSend(send, send_count, nccl_type(dtype), dst, comm, stream));
    if (recv_count > 0)
      COHORT_NCCL_CHECK(ncclRecv(recv, recv_count, nccl_type(dtype), src, comm, stream));
    COHORT_NCCL_CHECK(ncclGroupEnd());
    return Status::ok();
  });
}

std::shared_ptr<Work> NcclCommunicator::barrier_async(const BarrierOptions& options) {
  return launch("barrier", options.timeout, nullptr, [&](ncclComm_t comm, cudaStream_t stream) {
    COHORT_NCCL_CHECK(
        ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm, stream));
    return Status::ok();
  });
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::split(const std::vector<int>& ranks,
                                                              const SplitOptions& options) {
  int new_rank = -1;
  COHORT_RETURN_IF_ERROR(check_split(ranks, &new_rank));
  SplitOptions sub = options;
  sub.name = split_name(ranks, options);
  sub.timeout = effective_timeout(options.timeout);
  COHORT_ASSIGN_OR_RETURN(auto cpu, bootstrap_->split(ranks, sub));
  NcclOptions nccl = options_;
  nccl.name = sub.name;
  nccl.timeout = sub.timeout;
  nccl.device = device_;
  COHORT_ASSIGN_OR_RETURN(auto comm, create(std::shared_ptr<Communicator>(std::move(cpu)), nccl));
  return std::unique_ptr<Communicator>(std::move(comm));
}

Result<std::unique_ptr<NcclCommunicator>> init_nccl_world(const World& world, NcclOptions options) {
  if (options.device < 0) {
    int visible = 0;
    COHORT_CUDA_CHECK(cudaGetDeviceCount(&visible));
    if (visible == 0) return failed_precondition("init_nccl_world: no CUDA device is visible");
    options.device = visible == 1 ? 0 : world.local_rank % visible;
  }
  if (options.timeout == NcclOptions().timeout) options.timeout = world.cpu->timeout();
  return NcclCommunicator::create(world.cpu, options);
}

}  // namespace cohort::collective
