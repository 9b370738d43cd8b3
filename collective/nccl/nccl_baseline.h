// NcclBaseline: NCCL called directly, with nothing of cohort between the
// caller and the library: the reference that bench/collective_bench.cc
// measures NcclCommunicator against (DESIGN §9: cohort ≥ 0.98× raw NCCL bus
// bandwidth). It lives here because collective/nccl/ is the only place that
// calls NCCL; only the bench links it (cohort_nccl_baseline).
//
// What nccl-tests does: a blocking communicator on the current CUDA device,
// sums enqueued on the caller's stream, no events, no timeout, no error
// polling. Errors are the NCCL call's, with file and line.
// Threading: as NCCL, one thread issues.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "collective/communicator.h"

struct ncclComm;  // ncclComm_t, without NCCL's header

namespace cohort::collective {

class NcclBaseline {
 public:
  // Every rank of `bootstrap` calls this; rank 0's unique id reaches the
  // others through bootstrap.broadcast, as NcclCommunicator's does.
  static Result<std::unique_ptr<NcclBaseline>> create(Communicator& bootstrap);
  ~NcclBaseline();
  NcclBaseline(const NcclBaseline&) = delete;
  NcclBaseline& operator=(const NcclBaseline&) = delete;

  // Enqueued on `stream` (a cudaStream_t; nullptr: the default stream);
  // counts as NcclCommunicator's: all_gather's per rank sent,
  // reduce_scatter's per rank received.
  Status all_reduce(const void* send, void* recv, size_t count, DType dtype, void* stream);
  Status all_gather(const void* send, void* recv, size_t send_count, DType dtype, void* stream);
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, void* stream);

 private:
  explicit NcclBaseline(ncclComm* comm) : comm_(comm) {}
  ncclComm* comm_;
};

}  // namespace cohort::collective
