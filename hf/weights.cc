// HF-named safetensors for the decoder's parameters, in (shard-aware) and out.
#include "hf/weights.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/parallel_for.h"
#include "hf/config_json.h"
#include "hf/fused_experts.h"
#include "hf/quantized_tensors.h"
#include "hf/safetensors.h"

namespace cohort::hf {

using nlohmann::json;
using namespace models;

// The reads are pieces of about 1M elements (a parameter's rows, or a
// column-sharded parameter whole), spread over the machine's cores: the
// files are mapped, so the pieces share nothing but the page cache, and a
// 155M-element embedding no longer converts (and faults in its pages) on one
// thread while the others wait. On the CPU backend the reads land in the
// model's buffers directly. A quantized weight (quantized_tensors.h) is read
// whole once and dequantized in row pieces the same way.
Status load_weights(Model& model, const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open(dir));
  COHORT_ASSIGN_OR_RETURN(const QuantizationConfig quantization, load_quantization_config(dir));
  const bool direct = model.backend().device() == Device::kCpu;
  constexpr int64_t kPieceElements = int64_t{1} << 20;
  struct Piece {
    const ParamSpec* param;
    int64_t row_begin, row_end;  // of this rank's rows of the parameter
    std::optional<FusedSlice> fused;  // read whole from a fused expert tensor (fused_experts.h)
    const quant::QuantizedWeight* quantized = nullptr;  // null: a plain tensor
  };
  const int experts = model.config().moe.experts;
  std::vector<float> host;
  for (int g = 0; g < model.num_groups(); ++g) {
    const ParamGroup& group = model.layout().groups[g];
    if (!direct) host.resize(group.numel);
    float* base = direct ? model.params(g) : host.data();
    std::vector<Piece> pieces;
    std::vector<std::unique_ptr<quant::QuantizedWeight>> quantized;  // this group's
    for (const ParamSpec& p : group.params) {
      const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
      const int64_t row_elements = rows > 0 ? static_cast<int64_t>(p.numel) / rows : 0;
      if (experts > 0 && !ckpt.contains(p.name)) {
        std::optional<FusedSlice> fused = fused_expert_slice(p, experts);
        if (fused && ckpt.contains(fused->tensor)) {
          pieces.push_back({&p, 0, rows, std::move(fused), nullptr});
          continue;
        }
      }
      auto stored = read_quantized_weight(ckpt, quantization, p.name, p.global_shape);
      if (!stored.is_ok()) return stored.status().with_context(dir);
      if (*stored) {
        quantized.push_back(std::make_unique<quant::QuantizedWeight>(std::move(**stored)));
        const int64_t step = std::max<int64_t>(1, kPieceElements / p.global_shape[1]);
        for (int64_t r = 0; r < rows; r += step)
          pieces.push_back({&p, r, std::min(rows, r + step), std::nullopt, quantized.back().get()});
        continue;
      }
      if (p.shard_dim == ShardDim::kCols || p.shape.size() < 2 || row_elements == 0) {
        pieces.push_back({&p, 0, rows, std::nullopt, nullptr});
        continue;
      }
      const int64_t step = std::max<int64_t>(1, kPieceElements / row_elements);
      for (int64_t r = 0; r < rows; r += step)
        pieces.push_back({&p, r, std::min(rows, r + step), std::nullopt, nullptr});
    }
    std::vector<Status> results(pieces.size(), Status::ok());
    parallel_for(pieces.size(), [&](size_t i) {
      const Piece& piece = pieces[i];
      const ParamSpec& p = *piece.param;
      results[i] = [&]() -> Status {
        if (piece.fused) {
          const FusedSlice& f = *piece.fused;
          COHORT_ASSIGN_OR_RETURN(const SafetensorsFile* file, ckpt.file(f.tensor));
          if (file->find(f.tensor)->shape != f.shape) {
            return invalid_argument(dir + ": " + f.tensor + " has shape " + shape_string(file->find(f.tensor)->shape) +
                                    ", config.json implies " + shape_string(f.shape) + " (for " + p.name + ")");
          }
          return file->read_block_f32(f.tensor, f.row_begin, f.row_end, f.col_begin, f.col_end, base + p.offset);
        }
        if (piece.quantized) {
          return dequantize_param_rows(*piece.quantized, p, piece.row_begin, piece.row_end, base + p.offset)
              .with_context(dir);
        }
        COHORT_ASSIGN_OR_RETURN(const SafetensorsFile* file, ckpt.file(p.name));
        const SafetensorsInfo* info = file->find(p.name);
        if (info->shape != p.global_shape) {
          return invalid_argument(dir + ": " + p.name + " has shape " + shape_string(info->shape) +
                                  ", config.json implies " + shape_string(p.global_shape));
        }
        float* dst = base + p.offset;
        if (p.shard_dim == ShardDim::kCols) {
          return file->read_cols_f32(p.name, p.shard_begin, p.shard_begin + p.shape[1], dst);
        }
        if (p.shape.size() < 2) {
          return p.shard_dim == ShardDim::kRows
                     ? file->read_rows_f32(p.name, p.shard_begin, p.shard_begin + p.shape[0], dst)
                     : file->read_f32(p.name, dst);
        }
        // Replicated or row-sharded: rows [shard_begin + row_begin, ...) of
        // the file's tensor (shard_begin is 0 when replicated).
        const int64_t first = p.shard_dim == ShardDim::kRows ? p.shard_begin : 0;
        const int64_t row_elements = static_cast<int64_t>(p.numel) / p.shape[0];
        return file->read_rows_f32(p.name, first + piece.row_begin, first + piece.row_end,
                                   dst + piece.row_begin * row_elements);
      }();
    });
    for (const Status& s : results) COHORT_RETURN_IF_ERROR(s);
    if (!direct) model.backend().copy_from_host(model.params(g), host.data(), host.size() * sizeof(float));
    model.group_filled(g, direct ? model.params(g) : host.data());
  }
  return Status::ok();
}

Status save_model_folder(const Model& model, const std::string& dir, DType dtype, size_t max_shard_bytes) {
  if (model.shard().tp_size != 1) {
    return failed_precondition("save_model_folder needs an unsharded model; this is tp rank " +
                               std::to_string(model.shard().tp_rank) + " of " +
                               std::to_string(model.shard().tp_size));
  }
  std::vector<std::vector<float>> host(model.num_groups());
  std::vector<TensorToWrite> tensors;
  for (int g = 0; g < model.num_groups(); ++g) {
    const ParamGroup& group = model.layout().groups[g];
    host[g].resize(group.numel);
    model.backend().copy_to_host(host[g].data(), model.params(g), group.numel * sizeof(float));
    for (const ParamSpec& p : group.params) {
      tensors.push_back(TensorToWrite{p.name, p.shape, host[g].data() + p.offset, dtype});
    }
  }
  COHORT_RETURN_IF_ERROR(write_safetensors_folder(dir, tensors, max_shard_bytes));
  COHORT_RETURN_IF_ERROR(write_config_json(dir, model.config(), dtype));
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const ShardSpec& shard,
                                             Backend* backend, TensorParallelComm tp,
                                             int max_seq_cap) {
  COHORT_ASSIGN_OR_RETURN(ModelConfig config, load_config_json(dir, max_seq_cap));
  COHORT_ASSIGN_OR_RETURN(auto model, Model::create(config, shard, backend, std::move(tp)));
  COHORT_RETURN_IF_ERROR(load_weights(*model, dir));
  return model;
}

}  // namespace cohort::hf
