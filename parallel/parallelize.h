// parallelize: build this rank's part of a model for a job's mesh.
//
// Tensor parallelism first (the model is created as shard tp_rank of tp, its
// row-parallel sums and vocab-parallel cross-entropy wired to the mesh's tp
// group), then the data-parallel strategy over the dp group, block by block
// (DataParallel). The same seed gives every rank the slices of the same
// global model, so N ranks start exactly where 1 rank does.
//
// With LoRA (ParallelConfig::lora) the model is a frozen base: no gradient
// buffers, no optimizer state, every rank holding its tensor-parallel slice
// whole (replicated over dp) and, with base_dtype bf16, rounded to bf16 with
// its blocks' projections held in bf16; with nf4 or fp8 held quantized
// (QLoRA). Held blocks are expanded one at a time as they run
// (models/quantized_base.h); base_dtype fp32 keeps the base resident. The
// adapters on it (models/lora.h) are what the data-parallel strategy shards,
// reduces and updates; tensor parallelism cuts them as their projections.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "collective/communicator.h"
#include "models/backend.h"
#include "models/config.h"
#include "models/lora.h"
#include "models/model.h"
#include "models/quantized_base.h"
#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"

namespace cohort::parallel {

struct ParallelConfig {
  int tensor_parallel = 1;
  // Experts of a mixture of experts split over this many data-parallel
  // ranks (DeviceMesh); DDP only for now.
  int expert_parallel = 1;
  DataParallelOptions data_parallel;
  std::optional<models::LoraConfig> lora;  // train adapters on a frozen base
};

struct ParallelModel {
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::LoraAdapters> lora;   // with ParallelConfig::lora
  // A LoRA base held quantized (LoraConfig::base_format nf4 or fp8).
  std::unique_ptr<models::QuantizedBase> quantized_base;
  std::unique_ptr<DataParallel> data_parallel;  // destroyed before the adapters and the model
  // What the optimizer trains: the adapters under LoRA, else the model.
  models::TrainableParams& trained() const {
    return lora ? static_cast<models::TrainableParams&>(*lora) : *model;
  }
  ~ParallelModel();
  ParallelModel() = default;
  ParallelModel(ParallelModel&&) = default;
  ParallelModel& operator=(ParallelModel&&) = default;
};

// Fills the freshly created model's parameters (this rank's tp slice): from a
// seed, a Hugging Face folder or a checkpoint. Called before sharding.
using WeightLoader = std::function<Status(models::Model& model)>;
// Fills fresh LoRA adapters (this rank's tp slice): seeded (LoraAdapters::init)
// or from a PEFT adapter folder. Called before sharding, after the base loads.
using AdapterLoader = std::function<Status(models::LoraAdapters& adapters)>;

Result<ParallelModel> parallelize(const models::ModelConfig& config, collective::Communicator* world,
                                  models::Backend* backend, const ParallelConfig& parallel,
                                  const WeightLoader& load_weights, const AdapterLoader& load_adapters = {});

// Makes the trained model whole for passes that run no hooks (generation
// after training): sharded parameters gathered, a quantized base expanded.
Status prepare_for_inference(ParallelModel& pm);

// How a LoRA job's frozen base is held: bf16, nf4 or fp8 block by block;
// none (resident) for an fp32 base.
std::optional<models::HeldFormat> held_format(const models::LoraConfig& lora);

// The tp group's collectives as the model wants them (models/tensor_parallel.h).
// A failure aborts the worker with a message naming the group: a model
// half-way through a layer cannot carry on, and the job's restart takes over.
models::TensorParallelComm make_tensor_parallel_comm(collective::Communicator* tp, void* stream);
// The expert group's exchange as the model wants it (tensor_parallel.h), aborting likewise.
models::ExpertParallelComm make_expert_parallel_comm(collective::Communicator* ep, void* stream);

}  // namespace cohort::parallel
