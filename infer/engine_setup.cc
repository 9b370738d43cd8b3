// Device, tensor-parallel communicator and engine for an inference rank.
#include "infer/engine_setup.h"

#include "infer/lockstep.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "infer/lockstep.h"
#include "hf/load_quantization.h"
#include "hf/packed_projections.h"
#include "hf/peft_adapter.h"
#include "hf/peft_config.h"
#include "infer/model_source.h"
#include "models/cuda_backend.h"
#include "models/ops/kv_fp8.h"
#include "parallel/parallelize.h"

#include "models/decode/cuda_graph_engine.h"
#include "worker/compute_device.h"
#include "worker/debug_switches.h"
#include "worker/device_collectives.h"

namespace cohort::infer {
namespace {

// Builds this rank's shard as models::Model on `backend` and loads its weights.
Result<std::unique_ptr<models::decode::ModelEngine>> model_engine(const jobs::JobSpec& spec,
                                                  const models::ModelConfig& config,
                                                  std::unique_ptr<models::Backend> backend,
                                                  const parallel::DeviceMesh& mesh, void* stream,
                                                  int slots, int capacity) {
  const models::ShardSpec shard{mesh.tp_rank(), mesh.dims().tp};
  auto tp_comm = parallel::make_tensor_parallel_comm(&mesh.tp(), stream);
  COHORT_ASSIGN_OR_RETURN(auto model, models::Model::create(config, shard, backend.get(), tp_comm));
  COHORT_RETURN_IF_ERROR(load_infer_weights(spec.model, spec.infer.seed, *model));
  return models::decode::ModelEngine::create(std::move(backend), std::move(model), slots, capacity);
}

// serve.adapters: each PEFT folder as adapters on this shard of the
// engine's base, in the order the API names them (the table's, sorted by
// name).
Status add_served_adapters(const jobs::JobSpec& spec, models::decode::InferenceEngine& engine) {
  if (spec.job.kind != jobs::JobKind::kServe || spec.serve.adapters.empty()) return Status::ok();
  models::Model* base = engine.adapter_base();
  if (!base) return internal_error("serve.adapters: the " + engine.describe() + " engine takes no adapters");
  for (const auto& [name, folder] : spec.serve.adapters) {
    const std::string where = "serve.adapters." + name + " (" + folder + ")";
    auto peft = hf::read_peft_config(folder);
    if (!peft.is_ok()) return peft.status().with_context(where);
    auto made = models::LoraAdapters::create(*base, peft->lora);
    if (!made.is_ok()) return made.status().with_context(where);
    COHORT_RETURN_IF_ERROR(hf::load_peft_adapter(folder, **made).with_context(where));
    if (engine.add_adapter(std::move(*made)) < 0) {
      return failed_precondition(where + ": the engine refused it (" + engine.describe() + "; see the log)");
    }
  }
  return Status::ok();
}

#ifdef COHORT_HAVE_CUDA
// The largest rank among serve.adapters' folders (0 without any; a folder
// that does not read is named when the adapters load).
int served_adapter_rank(const jobs::JobSpec& spec) {
  int rank = 0;
  if (spec.job.kind != jobs::JobKind::kServe) return rank;
  for (const auto& [name, folder] : spec.serve.adapters) {
    auto peft = hf::read_peft_config(folder);
    if (peft.is_ok()) rank = std::max(rank, peft->lora.rank);
  }
  return rank;
}

// The paged cache's blocks when the job gives no size: what the GPU has
// room for (the least over the ranks, whose schedulers must agree), at most
// what the slots can fill.
Result<int64_t> kv_blocks_by_memory(const models::ModelConfig& config, const models::decode::CudaEngineOptions& options,
                                    double fraction, collective::World& world) {
  COHORT_ASSIGN_OR_RETURN(const models::decode::KvMemoryPlan plan,
                          models::decode::plan_kv_memory(config, options, fraction));
  const int64_t per_slot = (options.capacity + models::decode::kKvBlockSize - 1) / models::decode::kKvBlockSize;
  int64_t blocks = std::min<int64_t>(plan.blocks, int64_t(options.slots) * per_slot);
  COHORT_RETURN_IF_ERROR(world.cpu->all_reduce(&blocks, 1, collective::DType::kI64, {.op = collective::ReduceOp::kMin}));
  auto mib = [](double bytes) { return std::to_string(int64_t(bytes / (1 << 20))) + " MiB"; };
  if (blocks < per_slot) {
    return failed_precondition(
        "the KV cache does not fit one sequence of " + std::to_string(options.capacity) + " positions (" +
        mib(double(per_slot) * double(plan.block_bytes)) + "): the GPU has " + mib(double(plan.free_bytes)) +
        " free of " + mib(double(plan.total_bytes)) + ", the model's weights and buffers take " +
        mib(double(plan.engine_bytes)) + " and gpu_memory_fraction " + std::to_string(fraction).substr(0, 4) +
        " keeps " + mib(double(plan.kept_bytes)) + "; lower serve.context or raise serve.gpu_memory_fraction");
  }
  if (world.rank == 0) {
    spdlog::info("infer: {} KV cache of {} positions ({} blocks, {}), by {} free of {} after {} for the model",
                 models::kv_dtype_name(options.kv_dtype), blocks * models::decode::kKvBlockSize, blocks,
                 mib(double(blocks) * double(plan.block_bytes)),
                 mib(double(plan.free_bytes)), mib(double(plan.total_bytes)), mib(double(plan.engine_bytes)));
  }
  return blocks;
}
#endif

// The job's kv_cache_dtype ([serve] or [infer]), and the key it came from.
struct KvDtypeChoice {
  models::KvDtype dtype = models::KvDtype::kBf16;
  std::string key;
};
Result<KvDtypeChoice> kv_dtype_of(const jobs::JobSpec& spec) {
  const bool serve = spec.job.kind == jobs::JobKind::kServe;
  KvDtypeChoice choice;
  choice.key = serve ? "serve.kv_cache_dtype" : "infer.kv_cache_dtype";
  auto parsed = models::parse_kv_dtype(serve ? spec.serve.kv_cache_dtype : spec.infer.kv_cache_dtype);
  if (!parsed.is_ok()) return parsed.status().with_context(choice.key);
  choice.dtype = *parsed;
  return choice;
}

// An fp8 cache where the engine that runs keeps its own (fp32 or bf16)
// would silently take twice the memory the job planned for: refused.
Status refuse_fp8_kv(const KvDtypeChoice& kv, const std::string& engine, const std::string& why) {
  if (kv.dtype != models::KvDtype::kFp8) return Status::ok();
  return failed_precondition(kv.key + " = \"fp8\" needs the bf16 CUDA-graph engine, but this rank runs " + engine +
                             " (" + why + "); set it to \"bf16\" or serve where that engine runs");
}

Result<EngineBundle> build_unchecked(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                     collective::World& world, int tensor_parallel, int slots,
                                     int capacity, int64_t kv_positions, double gpu_memory_fraction,
                                     const worker::DebugSwitches& debug) {
  (void)gpu_memory_fraction;  // only the bf16 CUDA engine's cache is paged
  COHORT_ASSIGN_OR_RETURN(ParallelDims dims,
                          ParallelDims::create(world.size, tensor_parallel));
  COHORT_ASSIGN_OR_RETURN(worker::ComputeDevice device, worker::choose_compute_device(world, debug.device));
  EngineBundle bundle;
  bundle.on_gpu = device.gpu;
  COHORT_ASSIGN_OR_RETURN(const KvDtypeChoice kv_dtype, kv_dtype_of(spec));
  if (!device.gpu) {
    COHORT_ASSIGN_OR_RETURN(bundle.mesh, parallel::DeviceMesh::create(world.cpu.get(), dims));
    if (slots > 0) {
      COHORT_RETURN_IF_ERROR(refuse_fp8_kv(kv_dtype, "the CPU engine (fp32)", "no GPU was chosen"));
      COHORT_ASSIGN_OR_RETURN(bundle.engine, model_engine(spec, config, models::make_cpu_backend(),
                                                          *bundle.mesh, nullptr, slots, capacity));
    }
    return bundle;
  }
#ifdef COHORT_HAVE_CUDA
  models::set_serial_kernel_launches(debug.serial_launches);
  bool model_engine_wanted = debug.model_engine;
  std::string model_engine_why = "COHORT_INFER_ENGINE=model";
  const bool serves_adapters = spec.job.kind == jobs::JobKind::kServe && !spec.serve.adapters.empty();
  if (!model_engine_wanted) {
    // What the graph engine's kernels do not handle (a head size, expert or
    // adapter widths, expert parallelism, adapters of rank above its table's)
    // the models library's engine serves.
    models::decode::CudaEngineOptions fit;
    fit.lora = serves_adapters;
    fit.shard = models::ShardSpec{0, dims.tp};
    Status fits = models::decode::cuda_graph_engine_fits(config, fit);
    if (const int rank = served_adapter_rank(spec); fits.is_ok() && rank > models::decode::kGraphLoraRank) {
      fits = invalid_argument("serve.adapters: an adapter of rank " + std::to_string(rank) +
                              " is above the bf16 CUDA engine's " + std::to_string(models::decode::kGraphLoraRank));
    }
    if (!fits.is_ok()) {
      if (world.rank == 0 && kv_dtype.dtype != models::KvDtype::kFp8) {
        spdlog::warn("infer: {}; using the models library's CUDA engine, op by op", fits.message());
      }
      model_engine_wanted = true;
      model_engine_why = fits.message();
    }
  }
  if (model_engine_wanted) {
    COHORT_ASSIGN_OR_RETURN(bundle.device_world, worker::model_communicator(world, device));
    COHORT_ASSIGN_OR_RETURN(bundle.mesh,
                            parallel::DeviceMesh::create(bundle.device_world.get(), dims));
    if (slots == 0) return bundle;
    COHORT_RETURN_IF_ERROR(refuse_fp8_kv(kv_dtype, "the models library's CUDA engine", model_engine_why));
    COHORT_ASSIGN_OR_RETURN(auto backend, models::make_cuda_backend(device.cuda_device, {.op_times = debug.op_times}));
    void* stream = backend->stream();
    COHORT_ASSIGN_OR_RETURN(bundle.engine,
                            model_engine(spec, config, std::move(backend), *bundle.mesh, stream,
                                         slots, capacity));
    return bundle;
  }
  // The graph engine enqueues its collectives inside captured graphs, on a
  // GPU group whose NCCL id the CPU mesh's tp group carries.
  COHORT_ASSIGN_OR_RETURN(bundle.mesh, parallel::DeviceMesh::create(world.cpu.get(), dims));
  if (slots == 0) return bundle;
  models::decode::CudaEngineOptions options;
  options.device = device.cuda_device;
  options.slots = slots;
  options.capacity = capacity;
  options.cuda_graphs = spec.infer.cuda_graphs;
  // A server's forward takes up to max_batched_tokens rows (decode rows
  // and prompt chunks); the offline job's, whole prompts up to 8192 rows
  // (a packed prefill runs at the GEMMs' speed from a few thousand rows).
  options.step_rows = spec.job.kind == jobs::JobKind::kServe ? spec.serve.max_batched_tokens : 8192;
  options.prefix_caching = spec.job.kind == jobs::JobKind::kServe && spec.serve.prefix_caching;
  options.stream_blocks = model_streams_blocks(spec.model);
  options.lora = serves_adapters;
  options.shard = models::ShardSpec{bundle.mesh->tp_rank(), dims.tp};
  options.kv_dtype = kv_dtype.dtype;
  // `[model] quantize`: the projections stay quantized on the GPU (the
  // loaded model holds them round-tripped through the same format).
  COHORT_ASSIGN_OR_RETURN(options.projection_format, hf::parse_quantize_option(spec.model.quantize));
  // A pre-quantized folder: its projections stay as it stores them, read
  // packed (those the row layout cannot hold are served from the loaded values).
  if (!spec.model.hf_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(std::shared_ptr<hf::PackedProjections> packed,
                            hf::PackedProjections::open(spec.model.hf_dir));
    if (packed) {
      options.packed_bytes_like = packed->bytes_like();
      options.packed_projection = [packed](const models::ParamSpec& p) { return packed->read(p); };
    }
  }
  if (kv_positions > 0) {
    options.kv_blocks = (kv_positions + models::decode::kKvBlockSize - 1) / models::decode::kKvBlockSize;
  } else {
    COHORT_ASSIGN_OR_RETURN(options.kv_blocks, kv_blocks_by_memory(config, options, gpu_memory_fraction, world));
  }
  options.overrides = debug.decode;
  auto load = [&spec](models::Model& m) { return load_infer_weights(spec.model, spec.infer.seed, m); };
  COHORT_ASSIGN_OR_RETURN(
      bundle.engine,
      models::decode::make_cuda_graph_engine(
          config, options, worker::enqueued_tensor_parallel(&bundle.mesh->tp(), device.cuda_device), load));
  return bundle;
#else
  (void)kv_positions;
  return failed_precondition("a GPU was chosen but this cohort-worker was built without CUDA");
#endif
}

}  // namespace

Result<EngineBundle> build_engine(const jobs::JobSpec& spec, const models::ModelConfig& config,
                                  collective::World& world, int tensor_parallel, int slots,
                                  int capacity, int64_t kv_positions, double gpu_memory_fraction) {
  COHORT_ASSIGN_OR_RETURN(const worker::DebugSwitches debug, worker::read_debug_switches());
  COHORT_ASSIGN_OR_RETURN(EngineBundle bundle, build_unchecked(spec, config, world, tensor_parallel, slots, capacity,
                                                               kv_positions, gpu_memory_fraction, debug));
  if (bundle.engine) COHORT_RETURN_IF_ERROR(add_served_adapters(spec, *bundle.engine));
  // COHORT_INFER_CHECK_LOCKSTEP=1 (set by the tests): every engine call is
  // checked against the tp group's (lockstep.h). It needs
  // a CPU group, so the models-on-CUDA engine (NCCL mesh) goes unchecked.
  if (bundle.engine && debug.check_lockstep) {
    collective::Communicator& tp = bundle.mesh->tp();
    if (tp.size() > 1 && tp.device() == collective::Device::kCpu) {
      bundle.engine = check_lockstep(std::move(bundle.engine), &tp);
    }
  }
  return bundle;
}

}  // namespace cohort::infer
