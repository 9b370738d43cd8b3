// Where every parameter lives: one flat fp32 buffer per *group*, groups being
// the embedding, each transformer block, and the head, in that order:
//
//   group 0            "embed"    model.embed_tokens.weight      [V_local, H]
//   group 1 + i        "layers.i" input_layernorm [H], q_proj [Hq_l*D, H] (+ bias),
//                                 k_proj [Hkv_l*D, H] (+ bias), v_proj (same),
//                                 o_proj [H, Hq_l*D], q_norm [D], k_norm [D] (qk_norm),
//                                 post_attention_layernorm [H], gate_proj [I_l, H],
//                                 up_proj [I_l, H], down_proj [H, I_l]
//   group 1 + layers   "head"     model.norm.weight [H], lm_head.weight [V_local, H]
//                                 (absent when tied: the head then reads and
//                                 accumulates into the embedding group)
//
// Parameters are packed back to back in that order, each row-major in HF's
// [out, in] orientation, so a group is exactly what FSDP/ZeRO shard, gather
// and reduce, and gradients use the identical layout in a parallel buffer.
// Under tensor parallelism each ParamSpec records how its local tensor is cut
// from the global HF tensor (rows for column-parallel q/k/v/gate/up/embedding/
// lm_head, columns for row-parallel o/down, replicated for norms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"

namespace cohort::models {

enum class ShardDim { kReplicated, kRows, kCols };

struct ParamSpec {
  std::string name;                   // Hugging Face name
  std::vector<int64_t> shape;         // on this rank
  std::vector<int64_t> global_shape;  // in the unsharded model / HF file
  ShardDim shard_dim = ShardDim::kReplicated;
  int64_t shard_begin = 0;  // first global row (kRows) or column (kCols)
  size_t offset = 0;        // in floats, from the start of the group buffer
  size_t numel = 0;
  bool weight_decay = false;  // matrices decay; norms and biases do not
  // Gradient is a partial sum over tensor-parallel ranks (a replicated
  // parameter used only by this rank's heads: q_norm/k_norm, and k/v
  // projections when KV heads are replicated). parallel/ must sum it over the
  // ranks holding the same slice before the optimizer step.
  bool tp_partial_grad = false;
};

struct ParamGroup {
  std::string name;
  std::vector<ParamSpec> params;
  size_t numel = 0;
  const ParamSpec* find(const std::string& name) const;
};

// Offsets (in floats) of each block parameter inside a block group; kAbsent
// for parameters the config does not have. Identical for every block.
struct BlockOffsets {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t attn_norm, q, q_bias, k, k_bias, v, v_bias, o, q_norm, k_norm, mlp_norm, gate, up, down;
};

// Pointers into one block's params (or grads) buffer: the llm.c pointer table.
struct BlockTensors {
  float *attn_norm, *q, *q_bias, *k, *k_bias, *v, *v_bias, *o, *q_norm, *k_norm, *mlp_norm, *gate,
      *up, *down;
};

struct ParamLayout {
  std::vector<ParamGroup> groups;
  BlockOffsets block;
  int layers = 0;
  bool tied = false;

  static constexpr int kEmbedGroup = 0;
  int block_group(int layer) const { return 1 + layer; }
  int head_group() const { return 1 + layers; }
  size_t total_numel() const;
  BlockTensors block_tensors(float* base) const;  // nullptr for absent params
};

Result<ParamLayout> make_param_layout(const ModelConfig& config, const ShardSpec& shard);

}  // namespace cohort::models
