// MpiCommunicator: non-blocking MPI calls, polled to completion with a
// deadline.
#include "collective/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace cohort::collective {

namespace {

// cohort's MPI calls go one at a time: correct whatever thread level MPI
// granted, and cheap next to the calls themselves.
std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

Status mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + std::string(text, static_cast<size_t>(len)));
}

#define COHORT_MPI_CHECK(call)                                     \
  do {                                                             \
    int cohort_mpi_rc_ = (call);                                   \
    if (cohort_mpi_rc_ != MPI_SUCCESS) {                           \
      return mpi_error(cohort_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                              \
  } while (0)

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

Status ensure_initialized() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0;
  COHORT_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return Status::ok();
  int provided = 0;
  COHORT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  std::atexit(finalize_at_exit);
  return Status::ok();
}

template <DType D, ReduceOp O>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_cpu(D, O, inout, in, inout, static_cast<size_t>(*len));
}

template <DType D>
MPI_Op half_op(ReduceOp op) {
  // Created once, under the MPI mutex held by the caller.
  static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int i = op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;
  if (ops[i] == MPI_OP_NULL) {
    MPI_User_function* fns[3] = {user_reduce<D, ReduceOp::kSum>, user_reduce<D, ReduceOp::kMax>,
                                 user_reduce<D, ReduceOp::kMin>};
    MPI_Op_create(fns[i], /*commute=*/1, &ops[i]);
  }
  return ops[i];
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::kBF16) return half_op<DType::kBF16>(op);
  if (dtype == DType::kF16) return half_op<DType::kF16>(op);
  switch (op) {
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    default:
      return MPI_SUM;
  }
}

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mu;
  Status broken;  // GUARDED_BY(mu)

  Status get_broken() {
    std::lock_guard lock(mu);
    return broken;
  }
  void mark_broken(const Status& why) {
    std::lock_guard lock(mu);
    if (broken.is_ok())
      broken = aborted("communicator is broken since an earlier failure: " + why.message());
  }
};

namespace {

// One posted MPI request; wait() polls it until done or the deadline.
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiCommunicator::State> state, MPI_Request request, Milliseconds timeout,
          Status timeout_status, std::function<void()> finish,
          std::shared_ptr<std::vector<char>> scratch)
      : state_(std::move(state)),
        request_(request),
        deadline_(std::chrono::steady_clock::now() + timeout),
        timeout_status_(std::move(timeout_status)),
        finish_(std::move(finish)),
        scratch_(std::move(scratch)) {}

  Status wait() override {
    std::lock_guard lock(mu_);
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    auto nap = std::chrono::microseconds(20);
    while (!done_) {
      if (test_locked()) break;
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline_) {
        status_ = timeout_status_;
        state_->mark_broken(status_);
        done_ = true;
        break;
      }
      // Spin briefly (small messages finish in microseconds), then back off
      // so that waiting ranks leave the CPU to those still computing.
      if (now > spin_until) {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(2000));
      }
    }
    return status_;
  }
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return done_ || test_locked();
  }

 private:
  // Tests the request once; on completion runs `finish_`.
  bool test_locked() {
    int flag = 0;
    int rc;
    {
      std::lock_guard mpi_lock(mpi_mutex());
      rc = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
      status_ = mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
      state_->mark_broken(status_);
      done_ = true;
      return true;
    }
    if (!flag) return false;
    if (finish_) finish_();
    done_ = true;
    return true;
  }

  std::mutex mu_;
  std::shared_ptr<MpiCommunicator::State> state_;
  MPI_Request request_;  // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point deadline_;
  Status timeout_status_;
  std::function<void()> finish_;
  std::shared_ptr<std::vector<char>> scratch_;  // temporary buffers the request uses
  bool done_ = false;                           // GUARDED_BY(mu_)
  Status status_;                               // GUARDED_BY(mu_)
};

}  // namespace

bool launched_by_mpi() {
  for (const char* var :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  // A bare srun step (no PMI) is not MPI's: MPI_Init there fails or makes
  // every task a world of one. bootstrap.cc reads Slurm's variables instead.
  return false;
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create_world(const MpiOptions& options) {
  COHORT_RETURN_IF_ERROR(ensure_initialized());
  auto state = std::make_shared<State>();
  int rank = 0, size = 0;
  {
    std::lock_guard lock(mpi_mutex());
    COHORT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &state->comm));
    COHORT_MPI_CHECK(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN));
    COHORT_MPI_CHECK(MPI_Comm_rank(state->comm, &rank));
    COHORT_MPI_CHECK(MPI_Comm_size(state->comm, &size));
  }
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(std::move(state), rank, size, options));
}

MpiCommunicator::~MpiCommunicator() {
  std::lock_guard lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A broken communicator may still have requests in flight; freeing it
  // then is undefined, so it is left to MPI_Finalize.
  if (!finalized && state_->get_broken().is_ok() && state_->comm != MPI_COMM_NULL) {
    MPI_Comm_free(&state_->comm);
  }
}

namespace {

using Poster = std::function<int(MPI_Comm, MPI_Request*)>;

// Posts one non-blocking call. `context` turns a cause into the
// operation's error ("all_reduce on group ... failed: cause").
std::shared_ptr<Work> post(const std::shared_ptr<MpiCommunicator::State>& state,
                           Milliseconds timeout,
                           const std::function<Status(const Status&)>& context,
                           const Poster& poster, std::function<void()> finish = nullptr,
                           std::shared_ptr<std::vector<char>> scratch = nullptr) {
  Status broken = state->get_broken();
  if (!broken.is_ok()) return completed_work(context(broken));
  MPI_Request request = MPI_REQUEST_NULL;
  int rc;
  {
    std::lock_guard lock(mpi_mutex());
    rc = poster(state->comm, &request);
  }
  if (rc != MPI_SUCCESS) {
    Status s = context(mpi_error(rc, "posting the MPI call", __FILE__, __LINE__));
    state->mark_broken(s);
    return completed_work(s);
  }
  Status on_timeout = context(timeout_error(
      "not complete within the timeout: a peer died, hangs, or called a different operation"));
  return std::make_shared<MpiWork>(state, request, timeout, std::move(on_timeout),
                                   std::move(finish), std::move(scratch));
}

Status check_int(const std::string& op, size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return invalid_argument(op + ": " + std::to_string(count) +
                            " elements exceed MPI's int count; split the buffer");
  }
  return Status::ok();
}

}  // namespace

#define COHORT_MPI_CONTEXT(op, timeout)                         \
  [this, op_name = std::string(op), timeout](const Status& s) { \
    return op_error(op_name, timeout, s);                       \
  }

std::shared_ptr<Work> MpiCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                        DType dtype,
                                                        const AllReduceOptions& options) {
  Status s = check_buffers("all_reduce", send, recv, count);
  if (s.is_ok()) s = check_int("all_reduce", count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  ReduceOp op = options.op;
  int n = static_cast<int>(count);
  int size = size_;
  std::function<void()> finish;
  if (op == ReduceOp::kAvg) finish = [=] { divide_cpu(dtype, recv, count, size); };
  return post(
      state_, timeout, COHORT_MPI_CONTEXT("all_reduce", timeout),
      [=](MPI_Comm comm, MPI_Request* req) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mpi_type(dtype),
                              mpi_op(dtype, op), comm, req);
      },
      std::move(finish));
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                            size_t recv_count, DType dtype,
                                                            const ReduceScatterOptions& options) {
  Status s = check_buffers("reduce_scatter", send, recv, recv_count);
  if (s.is_ok()) s = check_int("reduce_scatter", recv_count * size_);
  if (!s.is_ok() || recv_count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  ReduceOp op = options.op;
  size_t chunk = recv_count * dtype_size(dtype);
  std::shared_ptr<std::vector<char>> scratch;
  const void* input = send;
  if (static_cast<const char*>(recv) < static_cast<const char*>(send) + chunk * size_ &&
      static_cast<const char*>(recv) + chunk > static_cast<const char*>(send)) {
    // recv overlaps send (in place): MPI wants distinct buffers.
    scratch = std::make_shared<std::vector<char>>(static_cast<const char*>(send),
                                                  static_cast<const char*>(send) + chunk * size_);
    input = scratch->data();
  }
  int n = static_cast<int>(recv_count);
  int size = size_;
  std::function<void()> finish;
  if (op == ReduceOp::kAvg) finish = [=] { divide_cpu(dtype, recv, recv_count, size); };
  return post(
      state_, timeout, COHORT_MPI_CONTEXT("reduce_scatter", timeout),
      [=](MPI_Comm comm, MPI_Request* req) {
        return MPI_Ireduce_scatter_block(input, recv, n, mpi_type(dtype), mpi_op(dtype, op), comm,
                                         req);
      },
      std::move(finish), std::move(scratch));
}

std::shared_ptr<Work> MpiCommunicator::all_gather_async(const void* send, void* recv,
                                                        size_t send_count, DType dtype,
                                                        const AllGatherOptions& options) {
  Status s = check_buffers("all_gather", send, recv, send_count);
  if (s.is_ok()) s = check_int("all_gather", send_count * size_);
  if (!s.is_ok() || send_count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  bool in_place = send == static_cast<char*>(recv) + send_count * dtype_size(dtype) * rank_;
  int n = static_cast<int>(send_count);
  return post(state_, timeout, COHORT_MPI_CONTEXT("all_gather", timeout),
              [=](MPI_Comm comm, MPI_Request* req) {
                MPI_Datatype t = mpi_type(dtype);
                return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, t, recv, n, t, comm, req);
              });
}

std::shared_ptr<Work> MpiCommunicator::all_gather_v_async(const void* send, void* recv,
                                                          const std::vector<size_t>& counts,
                                                          DType dtype,
                                                          const AllGatherOptions& options) {
  size_t total = 0;
  Status s = check_all_gather_v(send, recv, counts, &total);
  if (s.is_ok()) s = check_int("all_gather_v", total);
  if (!s.is_ok() || total == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  // The int arrays must outlive the request: they ride in the scratch.
  auto scratch = std::make_shared<std::vector<char>>(2 * counts.size() * sizeof(int));
  int* recvcounts = reinterpret_cast<int*>(scratch->data());
  int* displs = recvcounts + counts.size();
  int offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    recvcounts[r] = static_cast<int>(counts[r]);
    displs[r] = offset;
    offset += recvcounts[r];
  }
  bool in_place =
      send == static_cast<char*>(recv) + static_cast<size_t>(displs[rank_]) * dtype_size(dtype);
  int n = recvcounts[rank_];
  return post(
      state_, timeout, COHORT_MPI_CONTEXT("all_gather_v", timeout),
      [=](MPI_Comm comm, MPI_Request* req) {
        MPI_Datatype t = mpi_type(dtype);
        return MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, n, t, recv, recvcounts, displs, t,
                               comm, req);
      },
      nullptr, std::move(scratch));
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_v_async(const void* send,
                                                          const std::vector<size_t>& send_counts,
                                                          void* recv,
                                                          const std::vector<size_t>& recv_counts,
                                                          DType dtype, const AllToAllOptions& options) {
  size_t send_total = 0, recv_total = 0;
  Status s = check_all_to_all_v(send, send_counts, recv, recv_counts, dtype, &send_total, &recv_total);
  if (s.is_ok()) s = check_int("all_to_all_v", std::max(send_total, recv_total));
  if (!s.is_ok() || (send_total == 0 && recv_total == 0)) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  // Counts and displacements as MPI's ints, alive until the request ends.
  const size_t n = static_cast<size_t>(size_);
  auto scratch = std::make_shared<std::vector<char>>(4 * n * sizeof(int));
  int* ints = reinterpret_cast<int*>(scratch->data());
  int *sendcounts = ints, *sdispls = ints + n, *recvcounts = ints + 2 * n, *rdispls = ints + 3 * n;
  int send_offset = 0, recv_offset = 0;
  for (size_t p = 0; p < n; ++p) {
    sendcounts[p] = static_cast<int>(send_counts[p]), sdispls[p] = send_offset;
    recvcounts[p] = static_cast<int>(recv_counts[p]), rdispls[p] = recv_offset;
    send_offset += sendcounts[p], recv_offset += recvcounts[p];
  }
  return post(
      state_, timeout, COHORT_MPI_CONTEXT("all_to_all_v", timeout),
      [=](MPI_Comm comm, MPI_Request* req) {
        MPI_Datatype t = mpi_type(dtype);
        return MPI_Ialltoallv(send, sendcounts, sdispls, t, recv, recvcounts, rdispls, t, comm, req);
      },
      nullptr, std::move(scratch));
}

std::shared_ptr<Work> MpiCommunicator::broadcast_async(void* buf, size_t count, DType dtype,
                                                       const BroadcastOptions& options) {
  Status s = check_peer("broadcast", options.root);
  if (s.is_ok()) s = check_buffers("broadcast", buf, buf, count);
  if (s.is_ok()) s = check_int("broadcast", count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  int n = static_cast<int>(count);
  int root = options.root;
  return post(state_, timeout, COHORT_MPI_CONTEXT("broadcast", timeout),
              [=](MPI_Comm comm, MPI_Request* req) {
                return MPI_Ibcast(buf, n, mpi_type(dtype), root, comm, req);
              });
}

std::shared_ptr<Work> MpiCommunicator::barrier_async(const BarrierOptions& options) {
  auto timeout = effective_timeout(options.timeout);
  return post(state_, timeout, COHORT_MPI_CONTEXT("barrier", timeout),
              [](MPI_Comm comm, MPI_Request* req) { return MPI_Ibarrier(comm, req); });
}

// What a send and a receive check before posting: the peer, the buffer, a
// count MPI can take, and a tag within MPI's guaranteed range.
Status MpiCommunicator::check_point_to_point(const std::string& op, int peer, const void* buf,
                                             size_t count, uint32_t tag) const {
  COHORT_RETURN_IF_ERROR(check_peer(op, peer));
  COHORT_RETURN_IF_ERROR(check_buffers(op, buf, buf, count));
  COHORT_RETURN_IF_ERROR(check_int(op, count));
  if (tag > 32767) return invalid_argument(op + ": tag above 32767 (MPI's guaranteed bound)");
  return Status::ok();
}

std::shared_ptr<Work> MpiCommunicator::send_async(const void* buf, size_t count, DType dtype,
                                                  int peer, const SendRecvOptions& options) {
  std::string op = "send to rank " + std::to_string(peer);
  if (Status s = check_point_to_point(op, peer, buf, count, options.tag); !s.is_ok()) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  int n = static_cast<int>(count);
  int tag = static_cast<int>(options.tag);
  return post(state_, timeout, COHORT_MPI_CONTEXT(op, timeout),
              [=](MPI_Comm comm, MPI_Request* req) {
                return MPI_Isend(buf, n, mpi_type(dtype), peer, tag, comm, req);
              });
}

std::shared_ptr<Work> MpiCommunicator::recv_async(void* buf, size_t count, DType dtype, int peer,
                                                  const SendRecvOptions& options) {
  std::string op = "recv from rank " + std::to_string(peer);
  if (Status s = check_point_to_point(op, peer, buf, count, options.tag); !s.is_ok()) return completed_work(s);
  auto timeout = effective_timeout(options.timeout);
  int n = static_cast<int>(count);
  int tag = static_cast<int>(options.tag);
  return post(state_, timeout, COHORT_MPI_CONTEXT(op, timeout),
              [=](MPI_Comm comm, MPI_Request* req) {
                return MPI_Irecv(buf, n, mpi_type(dtype), peer, tag, comm, req);
              });
}

Result<std::unique_ptr<Communicator>> MpiCommunicator::split(const std::vector<int>& ranks,
                                                             const SplitOptions& options) {
  int new_rank = -1;
  COHORT_RETURN_IF_ERROR(check_split(ranks, &new_rank));
  COHORT_RETURN_IF_ERROR(state_->get_broken());
  // Members agree on the tag without talking: the rank list and how often it
  // was split before.
  size_t h = std::hash<std::string>()(split_name(ranks, {}));
  int tag = static_cast<int>((h + static_cast<size_t>(split_counts_[ranks]++)) % 32000);
  auto state = std::make_shared<State>();
  {
    std::lock_guard lock(mpi_mutex());
    MPI_Group parent_group, group;
    COHORT_MPI_CHECK(MPI_Comm_group(state_->comm, &parent_group));
    COHORT_MPI_CHECK(
        MPI_Group_incl(parent_group, static_cast<int>(ranks.size()), ranks.data(), &group));
    COHORT_MPI_CHECK(MPI_Comm_create_group(state_->comm, group, tag, &state->comm));
    COHORT_MPI_CHECK(MPI_Group_free(&group));
    COHORT_MPI_CHECK(MPI_Group_free(&parent_group));
    COHORT_MPI_CHECK(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN));
  }
  MpiOptions sub = options_;
  sub.name = split_name(ranks, options);
  sub.timeout = effective_timeout(options.timeout);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(std::move(state), new_rank, static_cast<int>(ranks.size()), sub));
}

}  // namespace cohort::collective
