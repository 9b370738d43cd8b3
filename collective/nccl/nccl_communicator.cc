// NcclCommunicator: non-blocking NCCL with event ordering, host waits that
// poll for asynchronous errors, and ncclCommAbort past the timeout.
#include "collective/nccl/nccl_communicator.h"

#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "collective/nccl/nccl_checks.h"

namespace cohort::collective {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct NcclCommunicator::State {
  std::mutex mu;
  ncclComm_t comm = nullptr;  // GUARDED_BY(mu); null once aborted
  Status broken;              // GUARDED_BY(mu)
  cudaStream_t stream = nullptr;

  // Events are recycled: creating two per operation costs more host time
  // than the launch itself. Re-recording an event is safe once every
  // cudaStreamWaitEvent on it was issued (a wait captures the event's state
  // at the time of the call).
  std::mutex events_mu;
  std::vector<cudaEvent_t> free_events;  // GUARDED_BY(events_mu)

  ~State() {
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
  }
  Result<cudaEvent_t> take_event() {
    {
      std::lock_guard lock(events_mu);
      if (!free_events.empty()) {
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give_event(cudaEvent_t e) {
    std::lock_guard lock(events_mu);
    free_events.push_back(e);
  }

  // Polls until the communicator has no call in progress. A non-blocking
  // communicator answers ncclInProgress for a moment after most launches:
  // spin briefly before sleeping, since even a 50 µs sleep (which the kernel
  // stretches to ~100 µs) was most of the cost of a small collective.
  Status wait_ready(Clock::time_point deadline, const char* what) {
    auto spin_until = Clock::now() + std::chrono::milliseconds(2);
    for (;;) {
      ncclResult_t r;
      {
        std::lock_guard lock(mu);
        if (comm == nullptr) return broken;
        COHORT_NCCL_CHECK(ncclCommGetAsyncError(comm, &r));
      }
      if (r == ncclSuccess) return Status::ok();
      if (r != ncclInProgress) return nccl_error(r, what, __FILE__, __LINE__);
      auto now = Clock::now();
      if (now >= deadline) return timeout_error(std::string(what) + " did not finish in time");
      if (now < spin_until) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
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
           Clock::time_point deadline, std::string prefix)
      : state_(std::move(state)),
        done_event_(done),
        deadline_(deadline),
        prefix_(std::move(prefix)) {}
  ~NcclWork() override { state_->give_event(done_event_); }

  Status wait() override {
    std::lock_guard lock(mu_);
    // Spin first: most waits end within microseconds of being asked.
    auto spin_until = Clock::now() + std::chrono::milliseconds(1);
    while (!finished_) {
      if (poll_locked()) break;
      if (Clock::now() >= deadline_) {
        Status timed_out = context(timeout_error(
            "not complete on the GPU within the timeout: a peer died, hangs, or called a "
            "different operation; ncclCommAbort was called"));
        state_->abort(timed_out);
        finish_locked(timed_out);
        break;
      }
      if (Clock::now() < spin_until) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return status_;
  }
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return finished_ || poll_locked();
  }
  Status wait_on_stream(void* stream) override {
    std::lock_guard lock(mu_);
    if (finished_ && !status_.is_ok()) return status_;
    cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_event_, 0);
    if (e != cudaSuccess) return context(cuda_error(e, "cudaStreamWaitEvent", __FILE__, __LINE__));
    return Status::ok();
  }

 private:
  bool poll_locked() {
    cudaError_t e = cudaEventQuery(done_event_);
    if (e == cudaSuccess) return finish_locked(Status::ok());
    if (e != cudaErrorNotReady)
      return finish_locked(context(cuda_error(e, "cudaEventQuery", __FILE__, __LINE__)));
    ncclResult_t r = ncclSuccess;
    {
      std::lock_guard lock(state_->mu);
      if (state_->comm == nullptr) return finish_locked(context(state_->broken));
      ncclCommGetAsyncError(state_->comm, &r);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      Status s = context(nccl_error(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
      state_->abort(s);
      return finish_locked(s);
    }
    return false;
  }
  // "<op> on group ... failed: " + cause, built only on failure.
  Status context(const Status& cause) const {
    return Status(cause.code(), prefix_ + cause.message());
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
  std::string prefix_;
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
  // Non-blocking by default, so that a missing peer cannot hang init past
  // the timeout.
  config.blocking = options.blocking ? 1 : 0;
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

Status NcclCommunicator::async_error() {
  std::lock_guard lock(state_->mu);
  if (state_->comm == nullptr) return state_->broken;
  ncclResult_t r = ncclSuccess;
  COHORT_NCCL_CHECK(ncclCommGetAsyncError(state_->comm, &r));
  if (r == ncclSuccess || r == ncclInProgress) return Status::ok();
  return op_error("asynchronous error query", timeout(),
                  nccl_error(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
}

std::shared_ptr<Work> NcclCommunicator::launch(const std::string& op,
                                               Milliseconds requested_timeout, void* stream,
                                               bool caller_waits, const LaunchBody& body) {
  auto timeout = effective_timeout(requested_timeout);
  // Text, not `this`: a Work may outlive its communicator.
  std::string prefix = op_error(op, timeout, internal_error("")).message();
  auto fail = [&](const Status& cause) {
    Status s(cause.code(), prefix + cause.message());
    state_->abort(s);
    return completed_work(s);
  };
  Status broken = state_->get_broken();
  if (!broken.is_ok()) return completed_work(Status(broken.code(), prefix + broken.message()));
  auto deadline = Clock::now() + timeout;
  auto caller = static_cast<cudaStream_t>(stream);
  // On the communication stream itself there is nothing to order against.
  bool cross_stream = caller != state_->stream;
  cudaEvent_t done = nullptr;
  auto order = [&]() -> Status {
    COHORT_CUDA_CHECK(cudaSetDevice(device_));
    if (cross_stream) {
      COHORT_ASSIGN_OR_RETURN(cudaEvent_t ready, state_->take_event());
      cudaError_t recorded = cudaEventRecord(ready, caller);
      cudaError_t waited =
          recorded == cudaSuccess ? cudaStreamWaitEvent(state_->stream, ready, 0) : recorded;
      state_->give_event(ready);  // the wait above already captured it
      if (waited != cudaSuccess)
        return cuda_error(waited, "ordering after the caller's stream", __FILE__, __LINE__);
    }
    {
      std::lock_guard lock(state_->mu);
      if (state_->comm == nullptr) return state_->broken;
      COHORT_RETURN_IF_ERROR(body(state_->comm, state_->stream));
    }
    COHORT_RETURN_IF_ERROR(state_->wait_ready(deadline, op.c_str()));
    COHORT_ASSIGN_OR_RETURN(done, state_->take_event());
    COHORT_CUDA_CHECK(cudaEventRecord(done, state_->stream));
    if (cross_stream && caller_waits) COHORT_CUDA_CHECK(cudaStreamWaitEvent(caller, done, 0));
    return Status::ok();
  };
  Status s = order();
  if (!s.is_ok()) {
    if (done != nullptr) state_->give_event(done);
    return fail(s);
  }
  return std::make_shared<NcclWork>(state_, done, deadline, std::move(prefix));
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
