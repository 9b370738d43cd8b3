// Where every parameter lives: one flat fp32 buffer per *group*, groups being
// the embedding, each transformer block, and the head, in that order:
//
//   group 0            "embed"    model.embed_tokens.weight      [V_local, H]
//   group 1 + i        "layers.i" input_layernorm [H], q_proj [Hq_l*D, H] (+ bias),
//                                 k_proj [Hkv_l*D, H] (+ bias), v_proj (same),
//                                 o_proj [H, Hq_l*D], q_norm [D], k_norm [D] (qk_norm),
//                                 post_attention_layernorm [H], gate_proj [I_l, H],
//                                 up_proj [I_l, H], down_proj [H, I_l]
//                                 or, in a sparse layer (ModelConfig::is_moe_layer),
//                                 the router mlp.gate [E, H], then for each expert
//                                 e in order mlp.experts.e.gate_proj [Ie_l, H],
//                                 up_proj [Ie_l, H], down_proj [H, Ie_l] (Mixtral:
//                                 block_sparse_moe.gate, experts.e.w1, w3, w2)
//   group 1 + layers   "head"     model.norm.weight [H], lm_head.weight [V_local, H]
//                                 (absent when tied: the head then reads and
//                                 accumulates into the embedding group)
//
// Parameters are packed back to back in that order, each row-major in HF's
// [out, in] orientation, so a group is exactly what FSDP/ZeRO shard, gather
// and reduce, and gradients use the identical layout in a parallel buffer.
// Under tensor parallelism each ParamSpec records how its local tensor is cut
// from the global HF tensor (rows for column-parallel q/k/v/gate/up/embedding/
// lm_head, columns for row-parallel o/down, replicated for norms). An
// expert splits as the dense MLP does (its gate/up rows, its down columns);
// the router is replicated. One expert's three matrices are adjacent, so
// that a range of experts is one range of the group (expert parallelism).
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
  // One of this rank's experts under expert parallelism (ShardSpec::ep_size
  // > 1): other ranks of its expert group hold other experts at the same
  // offsets, so parallel/ sums its gradient over the ranks holding the same
  // expert (the expert group's replicas), not over the data-parallel axis.
  bool expert_parallel = false;
};

struct ParamGroup {
  std::string name;
  std::vector<ParamSpec> params;
  size_t numel = 0;
  const ParamSpec* find(const std::string& name) const;
};

// Offsets (in floats) of each block parameter inside a block group; kAbsent
// for parameters the config does not have. A dense block has gate, up and
// down, a sparse one router and experts (expert 0's gate_proj; expert e's
// three matrices start expert_stride floats further per e).
struct BlockOffsets {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t attn_norm, q, q_bias, k, k_bias, v, v_bias, o, q_norm, k_norm, mlp_norm, gate, up, down,
      router, experts;
};

// Pointers into one block's params (or grads) buffer: the llm.c pointer table.
struct BlockTensors {
  float *attn_norm, *q, *q_bias, *k, *k_bias, *v, *v_bias, *o, *q_norm, *k_norm, *mlp_norm, *gate,
      *up, *down, *router, *experts;
};

// One expert's matrices inside a sparse block (its gate_proj, up_proj,
// down_proj), from BlockTensors::experts.
struct ExpertTensors {
  float *gate, *up, *down;
};

struct ParamLayout {
  std::vector<ParamGroup> groups;
  std::vector<BlockOffsets> blocks;  // per layer
  int layers = 0;
  bool tied = false;
  size_t expert_stride = 0;  // floats from one expert's gate_proj to the next's

  static constexpr int kEmbedGroup = 0;
  int block_group(int layer) const { return 1 + layer; }
  int head_group() const { return 1 + layers; }
  size_t total_numel() const;
  // Layer `layer`'s table over its group buffer `base` (params or grads);
  // nullptr for absent params.
  BlockTensors block_tensors(int layer, float* base) const;
  ExpertTensors expert_tensors(const BlockTensors& block, int expert) const;
};

Result<ParamLayout> make_param_layout(const ModelConfig& config, const ShardSpec& shard);

// A linear projection's weight by its Hugging Face name (q/k/v/o_proj,
// gate/up/down_proj, an expert's included): what weight quantization
// applies to ([model] quantize, a QLoRA base); embeddings, norms, routers and
// the LM head are not.
bool is_projection_weight(const std::string& name);

}  // namespace cohort::models
