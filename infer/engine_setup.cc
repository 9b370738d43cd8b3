// Device, tensor-parallel communicator and engine for an inference rank.
#include "infer/engine_setup.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "base/env_knobs.h"
#include "infer/model_source.h"
#include "models/cuda_backend.h"
#include "parallel/parallelize.h"

#ifdef COHORT_HAVE_CUDA
#include "collective/nccl/nccl_communicator.h"
#endif
// Defined where CMake compiled the bf16 graph engine (infer/CMakeLists.txt).
#ifdef COHORT_HAVE_INFER_CUDA_ENGINE
#include "infer/cuda_graph_engine.h"
#endif

namespace cohort::infer {
namespace {

std::string env_or(EnvKnob knob, const std::string& fallback) {
  const char* v = read_env_knob(knob);
  return v ? std::string(v) : fallback;
}

Result<bool> choose_gpu() {
  const std::string device = env_or(EnvKnob::kInferDevice, "");
  const int gpus = models::cuda_device_count();
  if (device == "cpu") return false;
  if (device == "cuda") {
    if (gpus == 0) return failed_precondition("COHORT_INFER_DEVICE=cuda but no GPU is visible");
    return true;
  }
  if (!device.empty()) {
    return invalid_argument("COHORT_INFER_DEVICE='" + device + "': expected cpu or cuda");
  }
  return gpus > 0;
}

// Builds this rank's shard as models::Model on `backend` and loads its weights.
Result<std::unique_ptr<ModelEngine>> model_engine(const jobs::JobSpec& spec,
                                                  const models::ModelConfig& config,
                                                  std::unique_ptr<models::Backend> backend,
                                                  const parallel::DeviceMesh& mesh, void* stream,
                                                  int slots, int capacity) {
  const models::ShardSpec shard{mesh.tp_rank(), mesh.dims().tp};
  auto tp_comm = parallel::make_tensor_parallel_comm(&mesh.tp(), stream);
  COHORT_ASSIGN_OR_RETURN(auto model, models::Model::create(config, shard, backend.get(), tp_comm));
  COHORT_RETURN_IF_ERROR(load_infer_weights(spec.model, spec.infer.seed, *model));
  return ModelEngine::create(std::move(backend), std::move(model), slots, capacity);
}

Result<EngineBundle> build_unchecked(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                     collective::World& world, int tensor_parallel, int slots,
                                     int capacity, int64_t kv_positions) {
  (void)kv_positions;  // only the bf16 CUDA engine's cache is paged
  COHORT_ASSIGN_OR_RETURN(parallel::ParallelDims dims,
                          parallel::ParallelDims::create(world.size, tensor_parallel));
  COHORT_ASSIGN_OR_RETURN(bool gpu, choose_gpu());
  EngineBundle bundle;
  bundle.on_gpu = gpu;
  if (!gpu) {
    COHORT_ASSIGN_OR_RETURN(bundle.mesh, parallel::DeviceMesh::create(world.cpu.get(), dims));
    if (slots > 0) {
      COHORT_ASSIGN_OR_RETURN(bundle.engine, model_engine(spec, config, models::make_cpu_backend(),
                                                          *bundle.mesh, nullptr, slots, capacity));
    }
    return bundle;
  }
#ifdef COHORT_HAVE_CUDA
  // "own" devices show each worker one GPU; "node" (and torchrun-style
  // launches of tests) show all of the node's, and LOCAL_RANK picks.
  const int device = world.local_rank % models::cuda_device_count();
  bool model_engine_wanted = env_or(EnvKnob::kInferEngine, "graphs") == "model";
#ifdef COHORT_HAVE_INFER_CUDA_ENGINE
  if (!model_engine_wanted && !cuda_graph_engine_supports(config)) {
    if (world.rank == 0) {
      spdlog::warn("infer: head_dim {} does not suit the bf16 graph engine (16, 32, 64, 128 "
                   "or 256); using the models library's CUDA engine", config.head_dim);
    }
    model_engine_wanted = true;
  }
#else
  model_engine_wanted = true;
#endif
  if (model_engine_wanted) {
    collective::NcclOptions nccl;
    nccl.device = device;
    COHORT_ASSIGN_OR_RETURN(auto nccl_world, collective::NcclCommunicator::create(world.cpu, nccl));
    bundle.device_world = std::move(nccl_world);
    COHORT_ASSIGN_OR_RETURN(bundle.mesh,
                            parallel::DeviceMesh::create(bundle.device_world.get(), dims));
    if (slots == 0) return bundle;
    COHORT_ASSIGN_OR_RETURN(auto backend, models::make_cuda_backend(device));
    void* stream = backend->stream();
    COHORT_ASSIGN_OR_RETURN(bundle.engine,
                            model_engine(spec, config, std::move(backend), *bundle.mesh, stream,
                                         slots, capacity));
    return bundle;
  }
#ifdef COHORT_HAVE_INFER_CUDA_ENGINE
  // The graph engine issues its own NCCL calls inside captured graphs; the
  // CPU mesh's tp group carries its NCCL id.
  COHORT_ASSIGN_OR_RETURN(bundle.mesh, parallel::DeviceMesh::create(world.cpu.get(), dims));
  if (slots == 0) return bundle;
  CudaEngineOptions options;
  options.device = device;
  options.slots = slots;
  options.capacity = capacity;
  options.cuda_graphs = spec.infer.cuda_graphs;
  options.kv_blocks = (kv_positions + kKvBlockSize - 1) / kKvBlockSize;
  options.shard = models::ShardSpec{bundle.mesh->tp_rank(), dims.tp};
  auto load = [&spec](models::Model& m) { return load_infer_weights(spec.model, spec.infer.seed, m); };
  COHORT_ASSIGN_OR_RETURN(bundle.engine,
                          make_cuda_graph_engine(config, options, &bundle.mesh->tp(), load));
#endif
  return bundle;
#else
  return failed_precondition("a GPU is visible but this cohort-worker was built without CUDA; "
                             "set COHORT_INFER_DEVICE=cpu or rebuild with the CUDA toolkit");
#endif
}

}  // namespace

Result<EngineBundle> build_engine(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                  collective::World& world, int tensor_parallel, int slots,
                                  int capacity, int64_t kv_positions) {
  COHORT_ASSIGN_OR_RETURN(EngineBundle bundle,
                          build_unchecked(spec, config, world, tensor_parallel, slots, capacity, kv_positions));
  // COHORT_INFER_CHECK_LOCKSTEP=1 (set by the tests): every engine call is
  // checked against the tp group's (engine.h, check_lockstep). It needs
  // a CPU group, so the models-on-CUDA engine (NCCL mesh) goes unchecked.
  if (bundle.engine && env_knob_on(EnvKnob::kInferCheckLockstep)) {
    collective::Communicator& tp = bundle.mesh->tp();
    if (tp.size() > 1 && tp.device() == collective::Device::kCpu) {
      bundle.engine = check_lockstep(std::move(bundle.engine), &tp);
    }
  }
  return bundle;
}

}  // namespace cohort::infer
