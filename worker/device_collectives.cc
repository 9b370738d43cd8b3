// enqueued_tensor_parallel (see device_collectives.h).
#include "worker/device_collectives.h"

#include <memory>
#include <string>

#ifdef COHORT_HAVE_NCCL
#include "collective/nccl/nccl_communicator.h"
#endif

namespace cohort::worker {

models::EnqueuedTensorParallelFactory enqueued_tensor_parallel(collective::Communicator* tp_cpu,
                                                               int device) {
  return [tp_cpu, device]() -> Result<models::EnqueuedTensorParallel> {
#ifdef COHORT_HAVE_NCCL
    collective::NcclOptions options;
    options.name = tp_cpu->name() + "/nccl";
    options.timeout = tp_cpu->timeout();
    options.device = device;
    options.blocking = true;
    // Non-owning: the CPU group outlives the engine (infer/engine_setup.h).
    std::shared_ptr<collective::Communicator> bootstrap(tp_cpu, [](collective::Communicator*) {});
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<collective::NcclCommunicator> made,
                            collective::NcclCommunicator::create(bootstrap, options));
    std::shared_ptr<collective::NcclCommunicator> nccl = std::move(made);
    models::EnqueuedTensorParallel group;
    group.size = nccl->size();
    group.rank = nccl->rank();
    group.stream = nccl->stream();
    group.timeout = options.timeout;
    collective::NcclCommunicator* comm = nccl.get();
    // Issued on the communicator's own stream and never waited on the host:
    // the stream orders them, so a graph can capture them. A failed launch
    // aborts the communicator, which async_error() reports at once.
    group.all_reduce_sum = [comm](float* data, size_t n) {
      collective::AllReduceOptions o;
      o.stream = comm->stream();
      comm->all_reduce_async(data, data, n, collective::DType::kF32, o);
    };
    group.all_gather = [comm](const float* local, float* gathered, size_t n_local) {
      collective::AllGatherOptions o;
      o.stream = comm->stream();
      comm->all_gather_async(local, gathered, n_local, collective::DType::kF32, o);
    };
    group.async_error = [comm] { return comm->async_error(); };
    group.owner = std::move(nccl);
    return group;
#else
    (void)tp_cpu;
    (void)device;
    return failed_precondition("this cohort-worker was built without NCCL: no GPU tensor-parallel group");
#endif
  };
}

}  // namespace cohort::worker
