// LoraAdapters: low-rank adapters on a Model's block projections (LoRA, Hu et
// al. 2021, as PEFT implements it), trained while the base stays frozen.
//
// For every targeted projection W [out, in] of every layer (lora_config.h)
// the adapters hold A [rank, in] and B [out, rank], and the block computes
//   y = W x + scale · B A dropout(x)
// forward adds the second term to the base layer's output, backward adds
// its share to the input gradient and accumulates (+=) the gradients of A and
// B. The base weights get no gradient: the model runs without gradient
// buffers for them (Model::Buffers::kParamsOnly), and the optimizer and
// parallel/ see only these adapters (TrainableParams).
//
// Layout. One flat group per model group, numbered as the model's hooks
// number them: the embedding and head groups are empty, block group 1 + l
// holds layer l's lora_A and lora_B of each target in block order, under
// PEFT's tensor names (peft_tensor_name). Under tensor parallelism an
// adapter is cut as its projection is: a column-parallel W (q, k, v, gate,
// up) has its rows of B and all of A, whose gradient is then a partial sum
// over the tp group (ParamSpec::tp_partial_grad); a row-parallel W (o,
// down) has its columns of A and all of B (partial). Nothing is
// communicated in the forward pass: the column-parallel delta is local, the
// row-parallel one is summed with the base's partial output.
//
// Compute. Everything runs on the model's backend through its ops (the
// linear layers, a scale, an accumulate, dropout), so the CPU reference and
// the CUDA backend both run it; nothing is saved between forward and
// backward: backward recomputes A dropout(x) (one skinny GEMM), and dropout
// masks are drawn again from their counter-based hash. Scratch for the
// largest row count seen is allocated on first use (warm-up).
//
// Dropout applies only inside a training pass (begin_training_pass): its
// masks are a function of (seed, pass, layer, projection, element), so the
// forward recomputed under activation checkpointing and the backward see the
// forward's mask, on any backend. Outside a pass (evaluation, generation)
// the adapters add their delta without noise.
//
// Threading: the model's thread only. The model must outlive the adapters.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "models/block_engine.h"
#include "models/lora_config.h"
#include "models/model.h"
#include "models/trainable_params.h"

namespace cohort::models {

class LoraAdapters final : public TrainableParams {
 public:
  // Zeroed adapters for `model`'s tensor-parallel shard, on its backend.
  static Result<std::unique_ptr<LoraAdapters>> create(const Model& model, const LoraConfig& config);
  ~LoraAdapters() override;
  LoraAdapters(const LoraAdapters&) = delete;
  LoraAdapters& operator=(const LoraAdapters&) = delete;

  const LoraConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }
  // TrainableParams.
  const ParamLayout& layout() const override { return layout_; }
  float* params(int group) const override { return params_[group]; }
  float* grads(int group) const override { return grads_[group]; }
  void set_group_buffers(int group, float* params, float* grads) override;
  void release_own_buffers() override;
  void zero_grads();

  // A as config().init says, B zero; each element depends only on (seed,
  // tensor name, global index), so a tensor-parallel shard holds the slice
  // of the unsharded adapters.
  void init(uint64_t seed);

  // Dropout masks for the passes that follow, until end_training_pass.
  void begin_training_pass(uint64_t seed, uint64_t pass);
  void end_training_pass() { pass_.reset(); }

  // The model's side (Model::set_lora). x [N, in_local] is the input the
  // base projections read, as the block holds it.
  struct Output {
    LoraTarget target;
    float* y;  // [N, out_local]: += scale · B A dropout(x)
  };
  void forward(int layer, const float* x, std::initializer_list<Output> outputs, int N);
  // The same for rows [first, first + count) of x and of each output (one
  // adapter's rows of a batch that serves several, Model::set_lora_rows).
  void forward_rows(int layer, const float* x, std::initializer_list<Output> outputs, int first, int count);
  struct OutputGrad {
    LoraTarget target;
    const float* dy;  // d loss / d y
  };
  // dA, dB of each target += their gradients; dx [N, in_local] += the
  // adapters' part of d loss / d x (null: not wanted).
  void backward(int layer, const float* x, float* dx, std::initializer_list<OutputGrad> outputs,
                int N);

  // Bytes of scratch allocated so far.
  size_t scratch_bytes() const { return scratch_floats_ * sizeof(float); }

  // The fused training blocks' view (block_engine.h): where each target's
  // A and B sit in a block group, and layer l's group in this pass.
  BlockAdapterShape block_shape() const;
  BlockAdapters block(int layer) const;

 private:
  // Where a target's tensors sit in a block group, and its local shape.
  struct Slot {
    bool present = false;
    size_t a = 0, b = 0;               // offsets of lora_A, lora_B
    int in = 0, out = 0;               // local W [out, in]
    int col_begin = 0, global_in = 0;  // x's columns in the unsharded input (dropout)
  };
  LoraAdapters(const Model& model, const LoraConfig& config);
  Status build_layout();
  const Slot& slot(LoraTarget target) const { return slots_[static_cast<int>(target)]; }
  void ensure_scratch(int N);
  // x, or its dropout (into scratch) inside a training pass.
  const float* dropped_input(int layer, LoraTarget target, const float* x, int N);
  DropoutMask mask(int layer, LoraTarget target) const;
  void forward_one(int layer, const float* x, const Output& output, int N);
  void backward_one(int layer, const float* x, float* dx, const OutputGrad& output, int N);

  const Model& model_;
  Backend& backend_;
  LoraConfig config_;
  ParamLayout layout_;
  Slot slots_[7];
  std::vector<float*> params_, grads_;
  std::vector<float*> owned_;
  std::optional<uint64_t> pass_;  // the mask stream of the current training pass
  // Scratch: the dropped input and its gradient [N, max in], A x [N, rank],
  // its gradient [N, rank], B A x [N, max out].
  int scratch_rows_ = 0;
  size_t scratch_floats_ = 0;
  float *xd_ = nullptr, *u_ = nullptr, *du_ = nullptr, *delta_ = nullptr;
  void* scratch_ = nullptr;
};

// LoraConfig::base_dtype kBF16: the frozen weights take bf16 values (what a
// bf16 base computes with), by the backend's round-to-nearest-even casts;
// kF32 leaves them as loaded.
void round_frozen_base(Model& model, DType dtype);
// The same for one group (a group without a buffer is left alone).
void round_group(Model& model, int group, DType dtype);

// W [out, in] += scale · B [out, rank] · A [rank, in], on host memory: the
// merged projection (`cohort export --merge`, a LoRA checkpoint loaded for
// inference).
// Adds each adapter's scale · B · A into the projection it sits on, in
// `model`'s own (frozen) weights and tensor-parallel shard: the model then
// computes what base plus adapters compute, at the base's cost (serving a
// PEFT adapter, [model] adapter). `adapters` must be `model`'s.
Status merge_lora_adapters(const LoraAdapters& adapters, Model& model);
// The same for the model's group `group` alone (a model that streams its
// blocks as they load); nothing for groups no adapter sits on.
Status merge_lora_group(const LoraAdapters& adapters, Model& model, int group);

void merge_lora_delta(float* w, const float* a, const float* b, int64_t out, int64_t in, int rank,
                      float scale);

}  // namespace cohort::models
