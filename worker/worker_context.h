// What every built-in worker sets up before it runs: the job's world (from
// the environment cohort, torchrun or mpirun left), the compute device and
// its backend (a GPU when this worker was given one and cohort was built with
// CUDA; the CPU otherwise), the communicator for model tensors (NCCL on GPU,
// the CPU world otherwise), the model config, and the sharded model.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "collective/bootstrap.h"
#include "jobs/spec.h"
#include "models/backend.h"
#include "models/config.h"
#include "models/lora_config.h"
#include "parallel/parallelize.h"
#include "worker/debug_switches.h"

namespace cohort::worker {

struct WorkerContext {
  collective::World world;                         // CPU world: control values, bootstrap
  std::shared_ptr<collective::Communicator> comm;  // model tensors: NCCL on GPU, else world.cpu
  std::unique_ptr<models::Backend> backend;
  bool gpu = false;
  void* stream = nullptr;  // the backend's CUDA stream
  std::string device_name = "cpu";
  DebugSwitches debug;  // read once at start (debug_switches.h)
  WorkerContext() = default;
  WorkerContext(WorkerContext&&) = default;
  WorkerContext& operator=(WorkerContext&&) = default;
};

Result<WorkerContext> make_worker_context(const jobs::JobSpec& spec);

// [model]: a preset, a Hugging Face folder's config.json, or a checkpoint's
// config (a run's folder or `latest` resolved); model.max_seq, when set,
// overrides; validated. The one resolution train, infer and serve share.
Result<models::ModelConfig> resolve_model_config(const jobs::ModelSection& model);

// The GEMM numerics a training job runs with: train.precision on GPU; on CPU
// fp32 unless the job asks for fp16 (emulated, so loss scaling can be used
// and tested without a GPU).
models::MatmulPrecision training_matmul_precision(const jobs::JobSpec& spec, bool gpu);
// The zero3/fsdp2 all-gather dtype: parallel.param_dtype, where auto is the
// GEMM precision's type.
models::DType training_param_dtype(const jobs::JobSpec& spec, bool gpu);

// [lora] as the worker runs it: the job's keys, or with lora.adapter the
// adapter folder's r, lora_alpha, use_rslora and target_modules (dropout and
// base_dtype stay the job's).
Result<models::LoraConfig> lora_config(const jobs::JobSpec& spec);

// The model sharded as [parallel] says, with its initial weights: from
// hf_dir, from model.checkpoint, or seeded (train.seed / infer.seed). A
// training job with [lora] gets a frozen base and adapters on it, seeded or
// from lora.adapter.
Result<parallel::ParallelModel> build_parallel_model(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                                     WorkerContext& ctx, bool for_training);

// 6·N·tokens/s over the GPU's peak bf16 rate (COHORT_PEAK_TFLOPS, else the
// H200's 989); none on CPU.
std::optional<double> model_flops_utilization(const models::ModelConfig& config, double tokens_per_s,
                                              const WorkerContext& ctx);
// Device memory in use on GPU; the process's peak resident set on CPU.
double memory_in_use_mb(const WorkerContext& ctx, parallel::ParallelModel& pm);

}  // namespace cohort::worker
