// Building an inference job's engine on this rank: the device (the worker's
// rule, worker/compute_device.h), the
// tensor-parallel group's communicator (NCCL on GPU, the world's Gloo/MPI on
// CPU), and the engine itself:
//   CPU                 ModelEngine over the fp32 CPU backend
//   GPU (default)       CudaGraphEngine: bf16 weights, decode as CUDA graphs
//                       (eager when infer.cuda_graphs = false)
//   GPU, COHORT_INFER_ENGINE=model   ModelEngine over models' CUDA backend
//                       (fp32 master weights; the reference for the above)
// Every rank of the world calls build_engine (the mesh splits are collective).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "collective/bootstrap.h"
#include "models/decode/engine.h"
#include "jobs/spec.h"
#include "models/config.h"
#include "parallel/device_mesh.h"

namespace cohort::infer {

struct EngineBundle {
  // Destroyed bottom-up: the engine, then the mesh, then the communicator
  // the mesh was split from.
  std::shared_ptr<collective::Communicator> device_world;  // NCCL on GPU; null on CPU
  std::unique_ptr<parallel::DeviceMesh> mesh;
  std::unique_ptr<models::decode::InferenceEngine> engine;  // null on ranks with no prompts
  bool on_gpu = false;
};

// `slots` 0 builds the mesh only (a data-parallel replica with no prompts).
// `kv_positions`: the positions a paged engine's cache holds for all slots
// together; 0: what `gpu_memory_fraction` of the GPU leaves after the
// engine's weights and buffers (models/decode/cuda_graph_engine.h,
// plan_kv_memory), at most slots × capacity, the same on every rank (the
// smallest); an error naming the numbers when one sequence of `capacity`
// does not fit. Engines whose slots own their rows ignore both.
inline constexpr double kDefaultGpuMemoryFraction = 0.9;
Result<EngineBundle> build_engine(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                  collective::World& world, int tensor_parallel, int slots,
                                  int capacity, int64_t kv_positions = 0,
                                  double gpu_memory_fraction = kDefaultGpuMemoryFraction);

}  // namespace cohort::infer
