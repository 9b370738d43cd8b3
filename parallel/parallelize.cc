#include "parallel/parallelize.h"

#include <spdlog/spdlog.h>

#include "base/check.h"

namespace cohort::parallel {

using collective::DType;

ParallelModel::~ParallelModel() {
  data_parallel.reset();
  model.reset();
  mesh.reset();
}

models::TensorParallelComm make_tensor_parallel_comm(collective::Communicator* tp, void* stream) {
  models::TensorParallelComm comm;
  if (tp->size() == 1) return comm;
  auto check = [tp](const Status& status, const char* what) {
    COHORT_CHECK_MSG(status.is_ok(), "tensor-parallel {} on group '{}' failed: {}", what, tp->name(),
                     status.message());
  };
  comm.all_reduce_sum = [tp, stream, check](float* data, size_t n) {
    collective::AllReduceOptions options;
    options.stream = stream;
    check(tp->all_reduce(data, n, DType::kF32, options), "all-reduce");
  };
  comm.all_reduce_max = [tp, stream, check](float* data, size_t n) {
    collective::AllReduceOptions options;
    options.op = collective::ReduceOp::kMax;
    options.stream = stream;
    check(tp->all_reduce(data, n, DType::kF32, options), "all-reduce max");
  };
  comm.all_gather = [tp, stream, check](const float* local, float* gathered, size_t n_local) {
    collective::AllGatherOptions options;
    options.stream = stream;
    check(tp->all_gather(local, gathered, n_local, DType::kF32, options), "all-gather");
  };
  return comm;
}

Result<ParallelModel> parallelize(const models::ModelConfig& config, collective::Communicator* world,
                                  models::Backend* backend, const ParallelConfig& parallel,
                                  const WeightLoader& load_weights) {
  COHORT_ASSIGN_OR_RETURN(ParallelDims dims, ParallelDims::create(world->size(), parallel.tensor_parallel));
  ParallelModel out;
  COHORT_ASSIGN_OR_RETURN(out.mesh, DeviceMesh::create(world, dims));
  models::ShardSpec shard{out.mesh->tp_rank(), dims.tp};
  auto tp_comm = make_tensor_parallel_comm(&out.mesh->tp(), parallel.data_parallel.stream);
  COHORT_ASSIGN_OR_RETURN(out.model, models::Model::create(config, shard, backend, tp_comm));
  COHORT_RETURN_IF_ERROR(load_weights(*out.model));
  COHORT_ASSIGN_OR_RETURN(out.data_parallel,
                          DataParallel::create(out.model.get(), out.mesh.get(), parallel.data_parallel));
  if (world->rank() == 0)
    spdlog::info("parallel: {} with {}; per rank {}", dims.to_string(),
                 strategy_name(parallel.data_parallel.strategy), out.data_parallel->memory().to_string());
  return out;
}

}  // namespace cohort::parallel
