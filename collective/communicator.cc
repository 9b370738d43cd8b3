// The blocking forms, the default paired send/recv and the argument checks
// every backend shares.
#include "collective/communicator.h"

#include <algorithm>
#include <set>

namespace cohort::collective {

namespace {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(Status status) : status_(std::move(status)) {}
  Status wait() override { return status_; }
  bool is_completed() override { return true; }

 private:
  Status status_;
};

// Both halves of a send_recv; the first error wins.
class PairWork final : public Work {
 public:
  PairWork(std::shared_ptr<Work> a, std::shared_ptr<Work> b) : a_(std::move(a)), b_(std::move(b)) {}
  Status wait() override {
    Status sa = a_->wait();
    Status sb = b_->wait();
    return sa.is_ok() ? sb : sa;
  }
  bool is_completed() override { return a_->is_completed() && b_->is_completed(); }

 private:
  std::shared_ptr<Work> a_, b_;
};

}  // namespace

std::shared_ptr<Work> completed_work(Status status) {
  return std::make_shared<CompletedWork>(std::move(status));
}

std::shared_ptr<Work> Communicator::send_recv_async(const void* send, size_t send_count, int dst,
                                                    void* recv, size_t recv_count, int src,
                                                    DType dtype, const SendRecvOptions& options) {
  // Receive first so that a rendezvous-style transport finds it posted.
  auto r = recv_async(recv, recv_count, dtype, src, options);
  auto s = send_async(send, send_count, dtype, dst, options);
  return std::make_shared<PairWork>(std::move(s), std::move(r));
}

Status Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                const AllReduceOptions& options) {
  return all_reduce_async(send, recv, count, dtype, options)->wait();
}
Status Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                    const ReduceScatterOptions& options) {
  return reduce_scatter_async(send, recv, recv_count, dtype, options)->wait();
}
Status Communicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                                const AllGatherOptions& options) {
  return all_gather_async(send, recv, send_count, dtype, options)->wait();
}
Status Communicator::all_gather_v(const void* send, void* recv, const std::vector<size_t>& counts,
                                  DType dtype, const AllGatherOptions& options) {
  return all_gather_v_async(send, recv, counts, dtype, options)->wait();
}
Status Communicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                  void* recv, const std::vector<size_t>& recv_counts, DType dtype,
                                  const AllToAllOptions& options) {
  return all_to_all_v_async(send, send_counts, recv, recv_counts, dtype, options)->wait();
}
Status Communicator::broadcast(void* buf, size_t count, DType dtype,
                               const BroadcastOptions& options) {
  return broadcast_async(buf, count, dtype, options)->wait();
}
Status Communicator::send(const void* buf, size_t count, DType dtype, int peer,
                          const SendRecvOptions& options) {
  return send_async(buf, count, dtype, peer, options)->wait();
}
Status Communicator::recv(void* buf, size_t count, DType dtype, int peer,
                          const SendRecvOptions& options) {
  return recv_async(buf, count, dtype, peer, options)->wait();
}
Status Communicator::barrier(const BarrierOptions& options) {
  return barrier_async(options)->wait();
}

Status Communicator::op_error(const std::string& op, Milliseconds timeout,
                              const Status& cause) const {
  return Status(cause.code(), op + " on group '" + name() + "' (rank " + std::to_string(rank()) +
                                  " of " + std::to_string(size()) + ", timeout " +
                                  std::to_string(timeout.count()) +
                                  " ms) failed: " + cause.message());
}

Status Communicator::check_peer(const std::string& op, int peer) const {
  if (peer < 0 || peer >= size()) {
    return invalid_argument(op + " on group '" + name() + "': peer rank " + std::to_string(peer) +
                            " is outside the group (size " + std::to_string(size()) + ")");
  }
  return Status::ok();
}

Status Communicator::check_buffers(const std::string& op, const void* a, const void* b,
                                   size_t count) const {
  if (count > 0 && (a == nullptr || b == nullptr)) {
    return invalid_argument(op + " on group '" + name() + "': null buffer for " +
                            std::to_string(count) + " elements");
  }
  return Status::ok();
}

Status Communicator::check_all_gather_v(const void* send, const void* recv,
                                        const std::vector<size_t>& counts, size_t* total) const {
  *total = 0;
  if (counts.size() != static_cast<size_t>(size())) {
    return invalid_argument("all_gather_v on group '" + name() + "': " +
                            std::to_string(counts.size()) + " counts given for a group of " +
                            std::to_string(size()) + " ranks");
  }
  for (size_t c : counts) *total += c;
  return check_buffers("all_gather_v", counts[rank()] > 0 ? send : recv, recv, *total);
}

Status Communicator::check_all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                        const void* recv, const std::vector<size_t>& recv_counts,
                                        DType dtype, size_t* send_total, size_t* recv_total) const {
  *send_total = *recv_total = 0;
  for (const auto* counts : {&send_counts, &recv_counts}) {
    if (counts->size() != static_cast<size_t>(size())) {
      return invalid_argument("all_to_all_v on group '" + name() + "': " + std::to_string(counts->size()) +
                              (counts == &send_counts ? " send" : " recv") + " counts given for a group of " +
                              std::to_string(size()) + " ranks");
    }
  }
  for (size_t c : send_counts) *send_total += c;
  for (size_t c : recv_counts) *recv_total += c;
  COHORT_RETURN_IF_ERROR(check_buffers("all_to_all_v", send, send, *send_total));
  COHORT_RETURN_IF_ERROR(check_buffers("all_to_all_v", recv, recv, *recv_total));
  const char* s = static_cast<const char*>(send);
  const char* r = static_cast<const char*>(recv);
  const size_t esize = dtype_size(dtype);
  if (*send_total > 0 && *recv_total > 0 && s < r + *recv_total * esize && r < s + *send_total * esize) {
    return invalid_argument("all_to_all_v on group '" + name() + "': send and recv overlap (it has no in-place form)");
  }
  return Status::ok();
}

Status Communicator::check_split(const std::vector<int>& ranks, int* new_rank) const {
  std::set<int> seen;
  *new_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size() || !seen.insert(ranks[i]).second) {
      return invalid_argument("split of group '" + name() + "': rank " + std::to_string(ranks[i]) +
                              " is out of range or repeated");
    }
    if (ranks[i] == rank()) *new_rank = static_cast<int>(i);
  }
  if (*new_rank < 0) {
    return invalid_argument("split of group '" + name() + "': rank " + std::to_string(rank()) +
                            " is not in the rank list; only members call split");
  }
  return Status::ok();
}

std::string Communicator::split_name(const std::vector<int>& ranks,
                                     const SplitOptions& options) const {
  if (!options.name.empty()) return options.name;
  std::string list;
  for (int r : ranks) {
    if (!list.empty()) list += ',';
    list += std::to_string(r);
  }
  return name() + "/[" + list + "]";
}

}  // namespace cohort::collective
