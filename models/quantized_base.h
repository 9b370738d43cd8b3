// A LoRA job's frozen base held compactly: every decoder block's projection
// weights (models::is_projection_weight: q/k/v/o_proj, gate/up/down_proj)
// kept in the backend's memory as bf16 (a bf16 base at half its fp32
// bytes), or quantized (QLoRA): NF4 with double quantization (blocks of 64,
// as QLoRA and bitsandbytes define it) or FP8 with 128 x 128 block scales,
// in the row layout (models/quant/row_packed.h). The block's other
// parameters (norms, biases, a router) are kept as they are.
//
// A block is expanded just before its forward or backward and dropped
// after, so the base costs its held bytes plus a block or two at a time,
// while the adapters (lora.h) train on it exactly as on a base whose
// weights were rounded (bf16) or round-tripped through the format. A
// quantized block is dequantized to fp32. A bf16 block, where the linear
// layers take bf16 operands (the CUDA backend's default precision), is not
// converted at all: its image is registered as the block's working weights
// (backend.h), which the GEMMs read directly, and only the kept parameters
// are copied into the block's fp32 buffer; under fp32 operands it is widened.
//
// It runs through the model's hooks: wrap() puts expand/drop around the
// hooks the data-parallel engine installed. Inference passes run no hooks:
// expand_all() keeps every block expanded in fp32 (a training job's sample).
//
// The embedding and head groups stay resident in the model (rounded to the
// base's dtype by the caller, as a bf16 base's are). Not thread-safe: the
// model's training thread drives it.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "models/model.h"
#include "models/quant/quantized_weight.h"

namespace cohort::models {

// How the block projections are held.
enum class HeldFormat { kBf16, kNf4, kFp8Block };
const char* to_string(HeldFormat format);

class QuantizedBase {
 public:
  // Holds `model`'s loaded block projections in `format` (a bf16 base's
  // are rounded to bf16 first, its kept parameters too), uploads them and
  // what else each block holds, and frees the model's own block buffers;
  // errors name the weight the format cannot take. Borrows the model, which
  // must outlive it.
  static Result<std::unique_ptr<QuantizedBase>> create(Model& model, HeldFormat format);
  // The same for a model created with Buffers::kStreamedBlocks, before its
  // weights load: each block is quantized as the loader fills it (first
  // rounded to `round_to`, kBF16 or kF32, as round_frozen_base would; a
  // bf16 base always to kBF16), so no more than one block is ever held in
  // fp32. finish_stream() after the loader: errors if a block never
  // arrived, then frees the staging buffer.
  static Result<std::unique_ptr<QuantizedBase>> stream(Model& model, HeldFormat format, DType round_to);
  Status finish_stream();
  ~QuantizedBase();
  QuantizedBase(const QuantizedBase&) = delete;
  QuantizedBase& operator=(const QuantizedBase&) = delete;

  // `inner` with each block group expanded around its forward and its
  // backward (inner's hooks run while it is expanded).
  ModelHooks wrap(ModelHooks inner);
  // Every block expanded and kept so (for passes without hooks).
  void expand_all();
  HeldFormat format() const { return format_; }
  // Bytes of the held projections (bf16 values, or codes and scales) and
  // of the kept parameters, in the backend's memory.
  size_t stored_bytes() const { return stored_bytes_; }
  // What an fp32 base's blocks would take.
  size_t unquantized_bytes() const { return unquantized_bytes_; }

 private:
  struct Projection {
    size_t offset = 0;  // in the group buffer
    quant::RowPackedView view;
  };
  struct Kept {
    size_t offset = 0, numel = 0;
    float* data = nullptr;
  };
  struct Block {
    int group = 0;
    size_t numel = 0;
    std::vector<Projection> projections;
    std::vector<Kept> kept;
    const uint16_t* image = nullptr;  // bf16: the whole group's values
    float* expanded = nullptr;        // while expanded
    bool attached = false;            // bf16: the image is the expanded buffer's working weights
    int holds = 0;                    // forward/backward passes holding it, or kPinned
  };
  static constexpr int kPinned = 1 << 20;

  explicit QuantizedBase(Model& model) : model_(model) {}
  // stream(): the format, rounding, what arrived and the first error.
  HeldFormat format_ = HeldFormat::kNf4;
  DType round_to_ = DType::kF32;
  Status stream_status_;
  // The block's values from `values` (host memory, rounded to `round_to`)
  // or, null, from the model's buffer as it is.
  Status add_block(int group, const float* values = nullptr, DType round_to = DType::kF32);
  // fp32: the block's buffer holds every value (else a bf16 block may
  // leave its projections to the working weights).
  void expand(int group, bool fp32 = false);
  void widen(Block& b);
  void drop(int group);
  Block* block_of(int group);
  void* keep(size_t bytes);

  Model& model_;
  std::vector<Block> blocks_;
  std::map<size_t, std::vector<float*>> free_;  // expansion buffers by numel
  std::vector<void*> owned_;                    // freed with this
  std::vector<float> staging_;                  // add_block's host copy of a block
  size_t stored_bytes_ = 0, unquantized_bytes_ = 0;
};

}  // namespace cohort::models
