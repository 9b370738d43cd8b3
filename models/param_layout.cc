// Builds the per-rank parameter layout from config and shard.
#include "models/param_layout.h"

namespace cohort::models {
namespace {

class GroupBuilder {
 public:
  explicit GroupBuilder(std::string name) { group_.name = std::move(name); }
  size_t add(std::string name, std::vector<int64_t> shape, std::vector<int64_t> global_shape,
             ShardDim dim, int64_t begin, bool tp_partial = false) {
    ParamSpec p;
    p.name = std::move(name);
    p.numel = 1;
    for (int64_t d : shape) p.numel *= static_cast<size_t>(d);
    p.weight_decay = shape.size() == 2;
    p.shape = std::move(shape);
    p.global_shape = std::move(global_shape);
    p.shard_dim = dim;
    p.shard_begin = begin;
    p.offset = group_.numel;
    p.tp_partial_grad = tp_partial;
    group_.numel += p.numel;
    group_.params.push_back(std::move(p));
    return group_.params.back().offset;
  }
  size_t replicated(std::string name, int64_t n, bool tp_partial = false) {
    return add(std::move(name), {n}, {n}, ShardDim::kReplicated, 0, tp_partial);
  }
  size_t replicated_matrix(std::string name, int64_t rows, int64_t cols) {
    return add(std::move(name), {rows, cols}, {rows, cols}, ShardDim::kReplicated, 0);
  }
  ParamGroup take() { return std::move(group_); }
  ParamSpec& last() { return group_.params.back(); }

 private:
  ParamGroup group_;
};

// A sparse layer's router and experts under HF's names: qwen3_moe's
// mlp.gate and mlp.experts.e.{gate,up,down}_proj, Mixtral's
// block_sparse_moe.gate and block_sparse_moe.experts.e.{w1,w3,w2}.
void add_experts(const ModelConfig& c, const LocalDims& d, const std::string& pre, GroupBuilder& g,
                 BlockOffsets* off) {
  const bool mixtral = c.model_type == "mixtral";
  const std::string moe = pre + (mixtral ? "block_sparse_moe." : "mlp.");
  const char* gate = mixtral ? "w1" : "gate_proj";
  const char* up = mixtral ? "w3" : "up_proj";
  const char* down = mixtral ? "w2" : "down_proj";
  const int64_t H = c.hidden, E = c.moe.experts, Ie = c.moe.expert_intermediate;
  const int64_t Iel = d.expert_intermediate, i0 = d.expert_intermediate_begin;
  off->router = g.replicated_matrix(moe + "gate.weight", E, H);
  // Under expert parallelism only this rank's experts, under their global
  // numbers (so loaders and checkpoints find them by name); they close the
  // group, one contiguous range (ParamLayout::expert_range).
  for (int64_t e = d.expert_begin; e < d.expert_begin + d.experts; ++e) {
    const std::string expert = moe + "experts." + std::to_string(e) + ".";
    const bool split = d.experts < E;
    const size_t first = g.add(expert + gate + ".weight", {Iel, H}, {Ie, H}, ShardDim::kRows, i0);
    g.last().expert_parallel = split;
    g.add(expert + up + ".weight", {Iel, H}, {Ie, H}, ShardDim::kRows, i0);
    g.last().expert_parallel = split;
    g.add(expert + down + ".weight", {H, Iel}, {H, Ie}, ShardDim::kCols, i0);
    g.last().expert_parallel = split;
    if (e == d.expert_begin) off->experts = first;
  }
}

ParamGroup block_group(const ModelConfig& c, const LocalDims& d, int tp, int layer,
                       BlockOffsets* off) {
  const std::string pre = "model.layers." + std::to_string(layer) + ".";
  const int64_t H = c.hidden, D = c.head_dim;
  const int64_t ql = d.q_dim(), kvl = d.kv_dim(), Il = d.intermediate;
  const int64_t q0 = d.head_begin * D, kv0 = d.kv_head_begin * D;
  const bool kv_partial = d.kv_replicated;
  GroupBuilder g("layers." + std::to_string(layer));
  *off = BlockOffsets{};
  size_t absent = BlockOffsets::kAbsent;
  off->q_bias = off->k_bias = off->v_bias = off->q_norm = off->k_norm = absent;
  off->attn_norm = g.replicated(pre + "input_layernorm.weight", H);
  off->q = g.add(pre + "self_attn.q_proj.weight", {ql, H}, {c.q_dim(), H}, ShardDim::kRows, q0);
  if (c.attention_bias) {
    off->q_bias = g.add(pre + "self_attn.q_proj.bias", {ql}, {c.q_dim()}, ShardDim::kRows, q0);
  }
  off->k = g.add(pre + "self_attn.k_proj.weight", {kvl, H}, {c.kv_dim(), H}, ShardDim::kRows, kv0,
                 kv_partial);
  if (c.attention_bias) {
    off->k_bias =
        g.add(pre + "self_attn.k_proj.bias", {kvl}, {c.kv_dim()}, ShardDim::kRows, kv0, kv_partial);
  }
  off->v = g.add(pre + "self_attn.v_proj.weight", {kvl, H}, {c.kv_dim(), H}, ShardDim::kRows, kv0,
                 kv_partial);
  if (c.attention_bias) {
    off->v_bias =
        g.add(pre + "self_attn.v_proj.bias", {kvl}, {c.kv_dim()}, ShardDim::kRows, kv0, kv_partial);
  }
  off->o = g.add(pre + "self_attn.o_proj.weight", {H, ql}, {H, c.q_dim()}, ShardDim::kCols, q0);
  if (c.qk_norm) {
    off->q_norm = g.replicated(pre + "self_attn.q_norm.weight", D, tp > 1);
    off->k_norm = g.replicated(pre + "self_attn.k_norm.weight", D, tp > 1);
  }
  off->mlp_norm = g.replicated(pre + "post_attention_layernorm.weight", H);
  off->gate = off->up = off->down = off->router = off->experts = absent;
  if (c.is_moe_layer(layer)) {
    add_experts(c, d, pre, g, off);
    return g.take();
  }
  const int64_t i0 = d.intermediate_begin;
  off->gate =
      g.add(pre + "mlp.gate_proj.weight", {Il, H}, {c.intermediate, H}, ShardDim::kRows, i0);
  off->up = g.add(pre + "mlp.up_proj.weight", {Il, H}, {c.intermediate, H}, ShardDim::kRows, i0);
  off->down =
      g.add(pre + "mlp.down_proj.weight", {H, Il}, {H, c.intermediate}, ShardDim::kCols, i0);
  return g.take();
}

}  // namespace

const ParamSpec* ParamGroup::find(const std::string& wanted) const {
  for (const ParamSpec& p : params) {
    if (p.name == wanted) return &p;
  }
  return nullptr;
}

size_t ParamLayout::total_numel() const {
  size_t n = 0;
  for (const ParamGroup& g : groups) n += g.numel;
  return n;
}

BlockTensors ParamLayout::block_tensors(int layer, float* base) const {
  const BlockOffsets& b = blocks.at(layer);
  auto at = [base](size_t off) { return off == BlockOffsets::kAbsent ? nullptr : base + off; };
  return BlockTensors{at(b.attn_norm), at(b.q),      at(b.q_bias),   at(b.k),      at(b.k_bias),
                      at(b.v),         at(b.v_bias), at(b.o),        at(b.q_norm), at(b.k_norm),
                      at(b.mlp_norm),  at(b.gate),   at(b.up),       at(b.down),   at(b.router),
                      at(b.experts)};
}

ExpertTensors ParamLayout::expert_tensors(const BlockTensors& block, int expert) const {
  // A frozen block (LoRA's base) has no gradient table: no expert's either.
  if (!block.experts) return ExpertTensors{nullptr, nullptr, nullptr};
  float* gate = block.experts + expert * expert_stride;
  const size_t matrix = expert_stride / 3;  // gate, up and down are equal in size
  return ExpertTensors{gate, gate + matrix, gate + 2 * matrix};
}

Result<ParamLayout> make_param_layout(const ModelConfig& c, const ShardSpec& shard) {
  COHORT_ASSIGN_OR_RETURN(LocalDims d, local_dims(c, shard));
  ParamLayout layout;
  layout.layers = c.layers;
  layout.tied = c.tie_embeddings;
  const int64_t H = c.hidden;
  GroupBuilder embed("embed");
  embed.add("model.embed_tokens.weight", {d.vocab, H}, {c.vocab_size, H}, ShardDim::kRows,
            d.vocab_begin);
  layout.groups.push_back(embed.take());
  layout.blocks.resize(c.layers);
  for (int i = 0; i < c.layers; ++i) {
    layout.groups.push_back(block_group(c, d, shard.tp_size, i, &layout.blocks[i]));
  }
  layout.expert_stride = 3 * static_cast<size_t>(d.expert_intermediate) * static_cast<size_t>(c.hidden);
  GroupBuilder head("head");
  head.replicated("model.norm.weight", H);
  if (!c.tie_embeddings) {
    head.add("lm_head.weight", {d.vocab, H}, {c.vocab_size, H}, ShardDim::kRows, d.vocab_begin);
  }
  layout.groups.push_back(head.take());
  return layout;
}

bool is_projection_weight(const std::string& name) {
  static const char* const kProjections[] = {
      ".q_proj.weight",    ".k_proj.weight",  ".v_proj.weight",   ".o_proj.weight",
      ".gate_proj.weight", ".up_proj.weight", ".down_proj.weight"};
  for (const char* suffix : kProjections) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

}  // namespace cohort::models
