// The bf16 graph engine where cohort was built without the CUDA toolkit:
// no config suits it, and making one says why.
#include "models/decode/cuda_graph_engine.h"

namespace cohort::models::decode {

Status cuda_graph_engine_fits(const models::ModelConfig&, const CudaEngineOptions&) {
  return failed_precondition("this build has no CUDA: the bf16 graph engine is absent");
}

Result<std::unique_ptr<InferenceEngine>> make_cuda_graph_engine(const models::ModelConfig&,
                                                                const CudaEngineOptions&,
                                                                const models::EnqueuedTensorParallelFactory&,
                                                                const EngineWeightLoader&) {
  return failed_precondition("this build has no CUDA: the bf16 graph engine is absent");
}

Result<KvMemoryPlan> plan_kv_memory(const models::ModelConfig&, const CudaEngineOptions&, double) {
  return failed_precondition("this build has no CUDA: no GPU memory to plan");
}

}  // namespace cohort::models::decode
