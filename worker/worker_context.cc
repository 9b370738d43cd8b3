#include "worker/worker_context.h"

#include <sys/resource.h>

#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/env_knobs.h"
#include "parallel/checkpoint.h"
#include "models/cuda_backend.h"
#include "hf/peft_adapter.h"
#include "hf/load_quantization.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "worker/compute_device.h"

namespace cohort::worker {

Result<WorkerContext> make_worker_context(const jobs::JobSpec& spec) {
  (void)spec;
  WorkerContext ctx;
  COHORT_ASSIGN_OR_RETURN(ctx.world, collective::init_from_environment());
  // Says how the ranks were found (cohort, torchrun, mpi, slurm): the first
  // thing to check when a launch by hand gives the wrong world.
  if (ctx.world.rank == 0) {
    spdlog::info("joined a world of {} ranks, {} per node ({} launch)", ctx.world.size, ctx.world.local_size,
                 collective::launch_name(ctx.world.launch));
  }
  COHORT_ASSIGN_OR_RETURN(ctx.debug, read_debug_switches());
  COHORT_ASSIGN_OR_RETURN(ComputeDevice device, choose_compute_device(ctx.world, ctx.debug.device));
  COHORT_ASSIGN_OR_RETURN(ctx.comm, model_communicator(ctx.world, device));
  ctx.device_name = device.name;
  if (!device.gpu) {
    ctx.backend = models::make_cpu_backend();
    return ctx;
  }
#ifdef COHORT_HAVE_CUDA
  models::set_serial_kernel_launches(ctx.debug.serial_launches);
  auto backend = models::make_cuda_backend(device.cuda_device, {.op_times = ctx.debug.op_times});
  if (!backend) return backend.status().with_context("CUDA device " + device.name);
  ctx.stream = (*backend)->stream();
  ctx.backend = std::move(*backend);
  ctx.gpu = true;
  return ctx;
#else
  return failed_precondition("a GPU device was chosen in a build without CUDA");
#endif
}

Result<models::ModelConfig> resolve_model_config(const jobs::ModelSection& m) {
  // One rule for every job kind: [model] max_seq when set, else the
  // folder's max_position_embeddings up to kDefaultMaxSeqCap (the RoPE
  // table is cheap; caches are sized by the work, not by max_seq).
  constexpr int kDefaultMaxSeqCap = 32768;
  Result<models::ModelConfig> config =
      !m.preset.empty()   ? models::preset_config(m.preset)
      : !m.hf_dir.empty() ? hf::load_config_json(m.hf_dir, m.max_seq > 0 ? m.max_seq : kDefaultMaxSeqCap)
      : !m.checkpoint.empty()
          ? parallel::checkpoint_model_config(parallel::resolve_checkpoint_path(m.checkpoint))
          : Result<models::ModelConfig>(invalid_argument("[model] needs one of preset, hf_dir or checkpoint"));
  if (!config) return config.status().with_context("[model]");
  if (m.max_seq > 0) config->max_seq = m.max_seq;
  COHORT_RETURN_IF_ERROR(config->validate().with_context("[model]"));
  return config;
}

models::MatmulPrecision training_matmul_precision(const jobs::JobSpec& spec, bool gpu) {
  switch (spec.train.precision) {
    case jobs::Precision::kFp16: return models::MatmulPrecision::kFp16;
    case jobs::Precision::kBf16: return gpu ? models::MatmulPrecision::kBf16 : models::MatmulPrecision::kFp32;
    case jobs::Precision::kFp32: return models::MatmulPrecision::kFp32;
  }
  return models::MatmulPrecision::kFp32;
}

models::DType training_param_dtype(const jobs::JobSpec& spec, bool gpu) {
  const std::string& d = spec.parallel.param_dtype;
  if (d == "bf16") return models::DType::kBF16;
  if (d == "fp16") return models::DType::kF16;
  if (d == "fp32") return models::DType::kF32;
  return models::matmul_operand_dtype(training_matmul_precision(spec, gpu));
}

Result<models::LoraConfig> lora_config(const jobs::JobSpec& spec) {
  const jobs::LoraSection& l = spec.lora;
  auto from_job = models::make_lora_config(l.rank, l.alpha, l.dropout, l.target_modules, l.use_rslora, l.init,
                                           l.base_dtype);
  if (!from_job) return from_job.status().with_context("[lora]");
  if (l.adapter.empty()) return from_job;
  auto folder = hf::read_peft_config(l.adapter);
  if (!folder) return folder.status().with_context("lora.adapter");
  models::LoraConfig lora = folder->lora;
  lora.dropout = from_job->dropout;
  lora.base_dtype = from_job->base_dtype;
  return lora;
}

Result<parallel::ParallelModel> build_parallel_model(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                                     WorkerContext& ctx, bool for_training) {
  parallel::ParallelConfig pc;
  int tp = spec.parallel.tensor_parallel;
  if (!for_training) tp = spec.infer.tensor_parallel > 0 ? spec.infer.tensor_parallel : ctx.world.size;
  pc.tensor_parallel = tp;
  if (for_training) pc.expert_parallel = spec.parallel.expert_parallel;
  pc.data_parallel.strategy = spec.parallel.strategy;
  pc.data_parallel.bucket_mb = spec.parallel.bucket_mb;
  pc.data_parallel.reshard_after_forward = spec.parallel.reshard_after_forward;
  pc.data_parallel.prefetch = spec.parallel.prefetch;
  pc.data_parallel.stream = ctx.stream;
  ctx.backend->set_attention_backend(models::attention_backend_named(spec.model.attention));
  if (for_training) {
    ctx.backend->set_matmul_precision(training_matmul_precision(spec, ctx.gpu));
    if (spec.model.attention == "flash" && ctx.gpu && !ctx.backend->attention_runs_fused(config.head_dim)) {
      return invalid_argument(fmt::format(
          "model.attention = \"flash\" needs head_dim 64 or 128 and bf16 GEMMs (this model: head_dim {}, "
          "train.precision {}); use \"auto\" or \"math\"",
          config.head_dim, jobs::to_string(spec.train.precision)));
    }
    if (spec.model.attention == "cudnn" && ctx.gpu) {
      if (!ctx.backend->attention_runs_fused(config.head_dim)) {
        return invalid_argument(fmt::format(
            "model.attention = \"cudnn\" runs inside the fused bf16 blocks: it needs head_dim 64 or 128 and "
            "bf16 GEMMs (this model: head_dim {}, train.precision {}); use \"auto\"",
            config.head_dim, jobs::to_string(spec.train.precision)));
      }
      COHORT_RETURN_IF_ERROR(ctx.backend->attention_available(models::AttentionBackend::kCudnn)
                                 .with_context("model.attention = \"cudnn\""));
    }
    pc.data_parallel.param_dtype = training_param_dtype(spec, ctx.gpu);
    if (spec.has_lora) { COHORT_ASSIGN_OR_RETURN(pc.lora, lora_config(spec)); }
  }
  uint64_t seed = uint64_t(for_training ? spec.train.seed : spec.infer.seed);
  const auto& m = spec.model;
  parallel::WeightLoader loader = [&](models::Model& model) -> Status {
    if (!m.hf_dir.empty()) {
      COHORT_RETURN_IF_ERROR(hf::load_weights(model, m.hf_dir));
    } else if (!m.checkpoint.empty()) {
      COHORT_RETURN_IF_ERROR(parallel::load_checkpoint_params(parallel::resolve_checkpoint_path(m.checkpoint), model));
    } else {
      model.init_weights(seed);
    }
    return hf::apply_quantize_option(model, m.quantize, m.hf_dir);
  };
  parallel::AdapterLoader adapters = [&](models::LoraAdapters& lora) -> Status {
    if (!spec.lora.adapter.empty()) return hf::load_peft_adapter(spec.lora.adapter, lora).with_context("lora.adapter");
    lora.init(seed);
    return Status::ok();
  };
  auto pm = parallel::parallelize(config, ctx.comm.get(), ctx.backend.get(), pc, loader, adapters);
  if (!pm) return pm.status().with_context("building the model");
  pm->model->set_fused_blocks(ctx.debug.fused_training_blocks);
  pm->model->set_fused_moe_blocks(ctx.debug.fused_moe_blocks);
  return pm;
}

std::optional<double> model_flops_utilization(const models::ModelConfig& config, double tokens_per_s,
                                              const WorkerContext& ctx) {
  if (!ctx.gpu) return std::nullopt;
  double peak = 989e12;
  if (const char* env = read_env_knob(EnvKnob::kPeakTflops)) peak = std::atof(env) * 1e12;
  // A mixture of experts multiplies by the experts a token reads, not all.
  double flops_per_token = 6.0 * double(config.num_active_parameters());
  // Per GPU: the job's tokens/s are spread over world GPUs.
  return flops_per_token * tokens_per_s / (peak * ctx.world.size);
}

double memory_in_use_mb(const WorkerContext& ctx, parallel::ParallelModel& pm) {
  (void)pm;
#ifdef COHORT_HAVE_CUDA
  if (ctx.gpu) {
    auto* cuda = static_cast<models::CudaBackend*>(ctx.backend.get());
    return double(cuda->stats().reserved_bytes) / (1 << 20);
  }
#else
  (void)ctx;
#endif
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

}  // namespace cohort::worker
