#include "parallel/parallelize.h"

#include <spdlog/spdlog.h>

#include "base/check.h"

namespace cohort::parallel {

using collective::DType;

ParallelModel::~ParallelModel() {
  data_parallel.reset();
  if (model) model->set_lora(nullptr);
  lora.reset();
  quantized_base.reset();
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

Status prepare_for_inference(ParallelModel& pm) {
  COHORT_RETURN_IF_ERROR(pm.data_parallel->gather_all());
  if (pm.quantized_base) pm.quantized_base->expand_all();
  return Status::ok();
}

models::ExpertParallelComm make_expert_parallel_comm(collective::Communicator* ep, void* stream) {
  models::ExpertParallelComm comm;
  comm.size = ep->size(), comm.rank = ep->rank();
  comm.all_to_all_v = [ep, stream](const float* send, const std::vector<size_t>& send_counts, float* recv,
                                   const std::vector<size_t>& recv_counts) {
    collective::AllToAllOptions options;
    options.stream = stream;
    const Status status = ep->all_to_all_v(send, send_counts, recv, recv_counts, DType::kF32, options);
    COHORT_CHECK_MSG(status.is_ok(), "expert-parallel all-to-all on group '{}' failed: {}", ep->name(),
                     status.message());
  };
  return comm;
}

std::optional<models::HeldFormat> held_format(const models::LoraConfig& lora) {
  switch (lora.base_format) {
    case models::LoraConfig::BaseFormat::kNf4: return models::HeldFormat::kNf4;
    case models::LoraConfig::BaseFormat::kFp8: return models::HeldFormat::kFp8Block;
    case models::LoraConfig::BaseFormat::kPlain: break;
  }
  if (lora.base_dtype == DType::kBF16) return models::HeldFormat::kBf16;
  return std::nullopt;
}

namespace {

// The frozen base and its adapters; the adapters become what is trained.
Status attach_lora(ParallelModel& out, const models::LoraConfig& lora, const AdapterLoader& load_adapters) {
  if (!load_adapters) return invalid_argument("parallelize: LoRA needs an adapter loader");
  models::round_frozen_base(*out.model, lora.base_dtype);
  COHORT_ASSIGN_OR_RETURN(out.lora, models::LoraAdapters::create(*out.model, lora));
  COHORT_RETURN_IF_ERROR(load_adapters(*out.lora));
  out.model->set_lora(out.lora.get());
  return Status::ok();
}

}  // namespace

Result<ParallelModel> parallelize(const models::ModelConfig& config, collective::Communicator* world,
                                  models::Backend* backend, const ParallelConfig& parallel,
                                  const WeightLoader& load_weights, const AdapterLoader& load_adapters) {
  COHORT_ASSIGN_OR_RETURN(ParallelDims dims, ParallelDims::create(world->size(), parallel.tensor_parallel,
                                                                  parallel.expert_parallel));
  ParallelModel out;
  COHORT_ASSIGN_OR_RETURN(out.mesh, DeviceMesh::create(world, dims));
  models::ShardSpec shard{out.mesh->tp_rank(), dims.tp, out.mesh->ep_rank(), dims.ep};
  auto tp_comm = make_tensor_parallel_comm(&out.mesh->tp(), parallel.data_parallel.stream);
  // A frozen base keeps no gradient buffers; a bf16 or quantized one
  // (QLoRA) is held block by block as it loads (models/quantized_base.h).
  const std::optional<models::HeldFormat> held = parallel.lora ? held_format(*parallel.lora) : std::nullopt;
  const auto buffers = held            ? models::Model::Buffers::kStreamedBlocks
                       : parallel.lora ? models::Model::Buffers::kParamsOnly
                                       : models::Model::Buffers::kParamsAndGrads;
  COHORT_ASSIGN_OR_RETURN(out.model, models::Model::create(config, shard, backend, tp_comm, buffers));
  if (dims.ep > 1) out.model->set_expert_parallel(make_expert_parallel_comm(&out.mesh->ep(), parallel.data_parallel.stream));
  if (held) {
    COHORT_ASSIGN_OR_RETURN(out.quantized_base,
                            models::QuantizedBase::stream(*out.model, *held, parallel.lora->base_dtype));
  }
  COHORT_RETURN_IF_ERROR(load_weights(*out.model));
  if (out.quantized_base) COHORT_RETURN_IF_ERROR(out.quantized_base->finish_stream());
  if (parallel.lora) COHORT_RETURN_IF_ERROR(attach_lora(out, *parallel.lora, load_adapters));
  COHORT_ASSIGN_OR_RETURN(out.data_parallel, DataParallel::create(out.model.get(), out.mesh.get(),
                                                                  parallel.data_parallel, &out.trained()));
  if (out.quantized_base) out.model->set_hooks(out.quantized_base->wrap(out.model->hooks()));
  if (world->rank() == 0) {
    if (out.lora) {
      size_t base_bytes = 0;
      for (const auto& g : out.model->layout().groups) base_bytes += g.numel * sizeof(float);
      if (out.quantized_base) {
        base_bytes += out.quantized_base->stored_bytes();
        base_bytes -= out.quantized_base->unquantized_bytes();
      }
      spdlog::info("parallel: LoRA {}: {} trainable parameters on a frozen base of {} ({:.1f} MiB per rank, "
                   "no gradients or optimizer state)",
                   models::describe(*parallel.lora), models::lora_parameter_count(config, *parallel.lora),
                   config.num_parameters(), double(base_bytes) / (1 << 20));
    }
    spdlog::info("parallel: {} with {}; per rank {}", dims.to_string(),
                 strategy_name(parallel.data_parallel.strategy), out.data_parallel->memory().to_string());
  }
  return out;
}

}  // namespace cohort::parallel
