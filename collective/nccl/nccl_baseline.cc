// The raw-NCCL baseline: one ncclCommInitRank, then each collective as a
// single NCCL call on the caller's stream.
#include "collective/nccl/nccl_baseline.h"

#include "collective/nccl/nccl_checks.h"

namespace cohort::collective {

Result<std::unique_ptr<NcclBaseline>> NcclBaseline::create(Communicator& bootstrap) {
  ncclUniqueId id;
  if (bootstrap.rank() == 0) COHORT_NCCL_CHECK(ncclGetUniqueId(&id));
  COHORT_RETURN_IF_ERROR(
      bootstrap.broadcast(&id, sizeof(id), DType::kU8).with_context("the baseline's NCCL id"));
  ncclComm_t comm = nullptr;
  COHORT_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::unique_ptr<NcclBaseline>(new NcclBaseline(comm));
}

NcclBaseline::~NcclBaseline() {
  (void)ncclCommDestroy(comm_);
}

Status NcclBaseline::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                void* stream) {
  COHORT_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), ncclSum, comm_,
                                  static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status NcclBaseline::all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                                void* stream) {
  COHORT_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_,
                                  static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status NcclBaseline::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                    void* stream) {
  COHORT_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), ncclSum, comm_,
                                      static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

}  // namespace cohort::collective
