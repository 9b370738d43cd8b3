// The nccl backend's operations: each is one launch() around the NCCL
// calls that do it.
#include "collective/nccl/nccl_checks.h"
#include "collective/nccl/nccl_communicator.h"

namespace cohort::collective {

std::shared_ptr<Work> NcclCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                         DType dtype,
                                                         const AllReduceOptions& options) {
  Status s = check_buffers("all_reduce", send, recv, count);
  if (!s.is_ok() || count == 0) return completed_work(s);
  return launch(
      "all_reduce", options.timeout, options.stream, !options.overlap, [&](ncclComm_t comm, cudaStream_t stream) {
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
  return launch("reduce_scatter", options.timeout, options.stream, !options.overlap,
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
      "all_gather", options.timeout, options.stream, !options.overlap, [&](ncclComm_t comm, cudaStream_t stream) {
        COHORT_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm, stream));
        return Status::ok();
      });
}

std::shared_ptr<Work> NcclCommunicator::all_gather_v_async(const void* send, void* recv,
                                                           const std::vector<size_t>& counts,
                                                           DType dtype,
                                                           const AllGatherOptions& options) {
  size_t total = 0;
  Status s = check_all_gather_v(send, recv, counts, &total);
  if (!s.is_ok() || total == 0) return completed_work(s);
  return launch(
      "all_gather_v", options.timeout, options.stream, !options.overlap, [&](ncclComm_t comm, cudaStream_t stream) {
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

// One group of sends and receives, as NCCL's own alltoallv example does: a
// send and a receive per peer with a non-empty block (itself included).
std::shared_ptr<Work> NcclCommunicator::all_to_all_v_async(const void* send,
                                                           const std::vector<size_t>& send_counts,
                                                           void* recv,
                                                           const std::vector<size_t>& recv_counts,
                                                           DType dtype,
                                                           const AllToAllOptions& options) {
  size_t send_total = 0, recv_total = 0;
  Status s = check_all_to_all_v(send, send_counts, recv, recv_counts, dtype, &send_total, &recv_total);
  if (!s.is_ok() || (send_total == 0 && recv_total == 0)) return completed_work(s);
  return launch("all_to_all_v", options.timeout, options.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
    const size_t esize = dtype_size(dtype);
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    COHORT_NCCL_CHECK(ncclGroupStart());
    size_t in_offset = 0, out_offset = 0;
    for (int p = 0; p < size_; ++p) {
      if (send_counts[p] > 0)
        COHORT_NCCL_CHECK(ncclSend(in + in_offset, send_counts[p], nccl_type(dtype), p, comm, stream));
      if (recv_counts[p] > 0)
        COHORT_NCCL_CHECK(ncclRecv(out + out_offset, recv_counts[p], nccl_type(dtype), p, comm, stream));
      in_offset += send_counts[p] * esize;
      out_offset += recv_counts[p] * esize;
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
  return launch("broadcast", options.timeout, options.stream, true,
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
  return launch(op, options.timeout, options.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
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
  return launch(op, options.timeout, options.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
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
  return launch(op, options.timeout, options.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
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
  return launch("barrier", options.timeout, nullptr, true, [&](ncclComm_t comm, cudaStream_t stream) {
    COHORT_NCCL_CHECK(
        ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm, stream));
    return Status::ok();
  });
}

}  // namespace cohort::collective
