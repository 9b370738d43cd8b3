// Model construction, buffers, deterministic initialisation and the forward pass.
#include "models/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/parallel_for.h"
#include "models/activations.h"
#include "models/counter_random.h"
#include "models/lora.h"
#include "models/ops/cross_entropy.h"
#include "models/ops/rope.h"
#include "models/param_init.h"
#include "models/spec.h"

namespace cohort::models {
namespace {

// The adapters' terms of one block op's outputs: each run's adapters on its
// rows (Model::set_lora_rows), or `lora` on every row.
void add_lora(LoraAdapters* lora, const std::vector<Model::LoraRows>& rows, int layer, const float* x,
              std::initializer_list<LoraAdapters::Output> outputs, int N) {
  if (rows.empty()) {
    if (lora) lora->forward(layer, x, outputs, N);
    return;
  }
  for (const Model::LoraRows& run : rows) {
    COHORT_CHECK(run.first >= 0 && run.first + run.count <= N);
    if (run.adapters && run.count > 0) run.adapters->forward_rows(layer, x, outputs, run.first, run.count);
  }
}

bool is_norm(const std::string& name) {
  return name.find("norm") != std::string::npos;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::create(const ModelConfig& config, const ShardSpec& shard,
                                             Backend* backend, TensorParallelComm tp,
                                             Buffers buffers) {
  COHORT_CHECK(backend != nullptr);
  COHORT_RETURN_IF_ERROR(check_executor(Executor::kCpuReference, DecoderSpec::of(config)));
  COHORT_ASSIGN_OR_RETURN(LocalDims dims, local_dims(config, shard));
  COHORT_ASSIGN_OR_RETURN(ParamLayout layout, make_param_layout(config, shard));
  if (shard.tp_size > 1 && !(tp.all_reduce_sum && tp.all_reduce_max && tp.all_gather)) {
    return invalid_argument("model: tp_size " + std::to_string(shard.tp_size) +
                            " needs all_reduce_sum, all_reduce_max and all_gather callbacks");
  }
  return std::unique_ptr<Model>(
      new Model(config, shard, dims, std::move(layout), backend, std::move(tp), buffers));
}

Model::Model(const ModelConfig& config, const ShardSpec& shard, const LocalDims& dims,
             ParamLayout layout, Backend* backend, TensorParallelComm tp, Buffers buffers)
    : config_(config),
      shard_(shard),
      dims_(dims),
      layout_(std::move(layout)),
      backend_(backend),
      tp_(std::move(tp)),
      acts_(std::make_unique<Activations>()) {
  // Streamed blocks share one staging buffer, as large as the largest block.
  float* staging = nullptr;
  if (buffers == Buffers::kStreamedBlocks) {
    size_t largest = 0;
    for (int l = 0; l < layout_.layers; ++l) largest = std::max(largest, layout_.groups[layout_.block_group(l)].numel);
    staging = backend_->alloc_floats(largest);
    owned_.push_back(staging);
    staging_ = staging;
  }
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    const ParamGroup& g = layout_.groups[i];
    const bool block = int(i) != ParamLayout::kEmbedGroup && int(i) != layout_.head_group();
    if (staging && block) {
      params_.push_back(staging);
      grads_.push_back(nullptr);
      continue;
    }
    params_.push_back(backend_->alloc_floats(g.numel));
    owned_.push_back(params_.back());
    if (buffers != Buffers::kParamsAndGrads) {
      grads_.push_back(nullptr);
      continue;
    }
    grads_.push_back(backend_->alloc_floats(g.numel));
    owned_.push_back(grads_.back());
  }
  const RopeTable table = make_rope_table(config_);
  rope_cos_ = backend_->alloc_floats(table.cos.size());
  rope_sin_ = backend_->alloc_floats(table.sin.size());
  backend_->copy_from_host(rope_cos_, table.cos.data(), table.cos.size() * sizeof(float));
  backend_->copy_from_host(rope_sin_, table.sin.data(), table.sin.size() * sizeof(float));
  owned_.push_back(rope_cos_);
  owned_.push_back(rope_sin_);
}

Model::~Model() {
  for (void* p : acts_->training_allocations) backend_->free(p);
  for (void* p : acts_->infer_allocations) backend_->free(p);
  for (float* p : owned_) backend_->free(p);
}

void Model::set_group_buffers(int group, float* params, float* grads) {
  COHORT_CHECK(group >= 0 && group < num_groups());
  params_[group] = params;
  grads_[group] = grads;
}

Result<Tensor> Model::view(const std::string& name, const std::vector<float*>& buffers) const {
  for (int g = 0; g < num_groups(); ++g) {
    const ParamSpec* p = layout_.groups[g].find(name);
    if (!p) continue;
    if (!buffers[g]) return failed_precondition("group of " + name + " has no buffer");
    return Tensor{buffers[g] + p->offset, p->shape, DType::kF32, backend_->device()};
  }
  return not_found("model has no parameter " + name + " on this rank");
}

Result<Tensor> Model::param_view(const std::string& name) const {
  return view(name, params_);
}
Result<Tensor> Model::grad_view(const std::string& name) const {
  return view(name, grads_);
}

void Model::release_own_buffers() {
  std::vector<float*> kept;
  for (float* p : owned_) {
    bool in_use = false;
    for (int g = 0; g < num_groups(); ++g) in_use = in_use || params_[g] == p || grads_[g] == p;
    bool is_group_buffer = p != rope_cos_ && p != rope_sin_;
    if (is_group_buffer && !in_use) {
      backend_->free(p);
      if (p == staging_) staging_ = nullptr;
    } else {
      kept.push_back(p);
    }
  }
  owned_ = std::move(kept);
}

void Model::zero_grads() {
  for (int g = 0; g < num_groups(); ++g) {
    if (!grads_[g]) continue;  // a frozen base (LoRA)
    backend_->zero(grads_[g], layout_.groups[g].numel * sizeof(float));
  }
}

void Model::init_weights(uint64_t seed, float stddev) {
  std::vector<float> host;
  for (int g = 0; g < num_groups(); ++g) {
    const ParamGroup& group = layout_.groups[g];
    // Zeroed over the cores: a 70B block is 3.4 GB, seconds on one thread.
    host.resize(group.numel);
    constexpr size_t kZeroChunk = size_t(1) << 24;
    parallel_for((group.numel + kZeroChunk - 1) / kZeroChunk, [&](size_t c) {
      std::fill(host.begin() + c * kZeroChunk, host.begin() + std::min(group.numel, (c + 1) * kZeroChunk), 0.0f);
    });
    // Every matrix's pieces of up to 1M draws in one pass over the cores
    // (a Qwen3-30B-A3B layer is 384 expert matrices of 1.6M each).
    struct Piece {
      const ParamSpec* param;
      size_t begin, end;
    };
    constexpr size_t kDrawPiece = size_t(1) << 20;
    std::vector<Piece> pieces;
    for (const ParamSpec& p : group.params) {
      float* dst = host.data() + p.offset;
      if (is_norm(p.name)) {
        std::fill(dst, dst + p.numel, 1.0f);
      } else if (p.shape.size() == 2) {
        for (size_t begin = 0; begin < p.numel; begin += kDrawPiece) {
          pieces.push_back({&p, begin, std::min(p.numel, begin + kDrawPiece)});
        }
      }  // biases stay zero, as in HF
    }
    parallel_for(pieces.size(), [&](size_t i) {
      const Piece& piece = pieces[i];
      const ParamSpec& p = *piece.param;
      fill_normal_range(host.data() + p.offset, p, splitmix64(seed) ^ hash_name(p.name), stddev, piece.begin,
                        piece.end);
    });
    // A streamed block whose listener takes the host copy skips the upload.
    if (!(group_filled_ && !listener_reads_buffer_ && staging_ && params_[g] == staging_)) {
      backend_->copy_from_host(params_[g], host.data(), group.numel * sizeof(float));
    }
    group_filled(g, host.data());
  }
}

float* Model::lm_head_weight() const {
  if (layout_.tied) return params_[ParamLayout::kEmbedGroup];
  const int head = layout_.head_group();
  return params_[head] + layout_.groups[head].find("lm_head.weight")->offset;
}

float* Model::lm_head_grad() const {
  if (layout_.tied) return grads_[ParamLayout::kEmbedGroup];
  const int head = layout_.head_group();
  if (!grads_[head]) return nullptr;  // a frozen base (LoRA)
  return grads_[head] + layout_.groups[head].find("lm_head.weight")->offset;
}

const float* Model::logits() const {
  return acts_->logits;
}

void Model::tp_sum(float* data, size_t n) {
  if (shard_.tp_size > 1) tp_.all_reduce_sum(data, n);
}

LossSum Model::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  auto call = [](const std::function<void(int)>& f, int g) {
    if (f) f(g);
  };
  call(hooks_.before_forward, ParamLayout::kEmbedGroup);
  forward_embedding(tokens, targets, B, T);
  call(hooks_.after_forward, ParamLayout::kEmbedGroup);
  for (int l = 0; l < config_.layers; ++l) {
    call(hooks_.before_forward, layout_.block_group(l));
    forward_block(l);
    call(hooks_.after_forward, layout_.block_group(l));
  }
  call(hooks_.before_forward, layout_.head_group());
  LossSum loss = forward_head();
  call(hooks_.after_forward, layout_.head_group());
  return loss;
}

void Model::backward(float grad_scale) {
  auto call = [](const std::function<void(int)>& f, int g) {
    if (f) f(g);
  };
  call(hooks_.before_backward, layout_.head_group());
  backward_head(grad_scale);
  call(hooks_.after_backward, layout_.head_group());
  for (int l = config_.layers - 1; l >= 0; --l) {
    call(hooks_.before_backward, layout_.block_group(l));
    backward_block(l);
    call(hooks_.after_backward, layout_.block_group(l));
  }
  call(hooks_.before_backward, ParamLayout::kEmbedGroup);
  backward_embedding();
  call(hooks_.after_backward, ParamLayout::kEmbedGroup);
}

void Model::forward_embedding(const int32_t* tokens, const int32_t* targets, int B, int T) {
  COHORT_CHECK_MSG(T <= config_.max_seq, "sequence length {} exceeds max_seq {}", T,
                   config_.max_seq);
  ensure_activations(B, T, targets == nullptr);
  Activations& a = *acts_;
  const int N = B * T;
  a.B = B;
  a.T = T;
  a.has_targets = targets != nullptr;
  for (int i = 0; i < N; ++i) {
    COHORT_CHECK_MSG(tokens[i] >= 0 && tokens[i] < config_.vocab_size, "token {} out of vocab",
                     tokens[i]);
  }
  backend_->copy_from_host(a.tokens, tokens, N * sizeof(int32_t));
  if (targets) {
    for (int i = 0; i < N; ++i) {
      COHORT_CHECK_MSG(
          targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < config_.vocab_size),
          "target {} out of vocab", targets[i]);
    }
    a.host_targets.assign(targets, targets + N);
    backend_->copy_from_host(a.targets, targets, N * sizeof(int32_t));
  }
  host_pos_.resize(N);
  for (int i = 0; i < N; ++i) host_pos_[i] = i % T;
  backend_->copy_from_host(a.pos, host_pos_.data(), N * sizeof(int32_t));
  backend_->embedding_forward(a.res[0], a.tokens, embedding_table(), N, config_.hidden,
                              dims_.vocab_begin, dims_.vocab);
  tp_sum(a.res[0], static_cast<size_t>(N) * config_.hidden);
}

HeadTensors Model::head_tensors() const {
  const int head = layout_.head_group();
  // model.norm.weight comes first in the head group.
  return {params_[head], lm_head_weight(), grads_[head], grads_[head] ? lm_head_grad() : nullptr};
}

BlockPass Model::block_pass() const {
  return {acts_->B, acts_->T, acts_->pos, rope_cos_, rope_sin_, acts_->moe_aux_grad};
}

Model::BlockIo Model::training_block_io(int l) const {
  Activations& a = *acts_;
  return BlockIo{a.res[l], a.xn1[l], a.rstd1[l], a.q[l],  a.k[l],   a.v[l], a.qr[l],
                 a.kr[l],  a.rstd_q[l], a.rstd_k[l], a.y[l], a.tmp, a.x2[l], a.xn2[l],
                 a.rstd2[l], a.g[l], a.u[l], a.h[l], a.res[l + 1], a.pos,
                 config_.is_moe_layer(l) ? &a.moe[l] : nullptr};
}

void Model::forward_block(int l) {
  Activations& a = *acts_;
  const BlockTensors w = layout_.block_tensors(l, params_[layout_.block_group(l)]);
  if (engine_) {
    const BlockAdapters adapters = lora_ ? lora_->block(l) : BlockAdapters{};
    engine_->forward(l, w, a.res[l], a.res[l + 1], block_pass(), lora_ ? &adapters : nullptr);
    return;
  }
  const BlockIo io = training_block_io(l);
  block_forward(l, w, io, a.B * a.T, [&] {
    backend_->attention_forward(io.y, a.lse[l], a.attn_scratch, io.qr, io.kr, io.v, a.B, a.T, dims_.heads,
                                dims_.kv_heads, config_.head_dim);
  });
}

void Model::block_forward(int layer, const BlockTensors& w, const BlockIo& io, int N,
                          const std::function<void()>& attend) {
  Backend& be = *backend_;
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const float eps = config_.rms_eps;
  const size_t nH = static_cast<size_t>(N) * H;
  be.rmsnorm_forward(io.xn1, io.rstd1, io.x, w.attn_norm, N, H, eps);
  be.linear_forward(io.q, io.xn1, w.q, w.q_bias, N, H, Qd);
  be.linear_forward(io.k, io.xn1, w.k, w.k_bias, N, H, KVd);
  be.linear_forward(io.v, io.xn1, w.v, w.v_bias, N, H, KVd);
  using T = LoraTarget;
  add_lora(lora_, lora_rows_, layer, io.xn1, {{T::kQ, io.q}, {T::kK, io.k}, {T::kV, io.v}}, N);
  rotate_qk(w, io, N);
  attend();
  be.linear_forward(io.tmp, io.y, w.o, nullptr, N, Qd, H);
  add_lora(lora_, lora_rows_, layer, io.y, {{T::kO, io.tmp}}, N);
  tp_sum(io.tmp, nH);
  be.residual_forward(io.x2, io.x, io.tmp, nH);
  be.rmsnorm_forward(io.xn2, io.rstd2, io.x2, w.mlp_norm, N, H, eps);
  if (io.moe) {
    moe_forward(w, *io.moe, io.xn2, io.tmp, N);
  } else {
    be.linear_forward(io.g, io.xn2, w.gate, nullptr, N, H, I);
    be.linear_forward(io.u, io.xn2, w.up, nullptr, N, H, I);
    add_lora(lora_, lora_rows_, layer, io.xn2, {{T::kGate, io.g}, {T::kUp, io.u}}, N);
    be.swiglu_forward(io.h, io.g, io.u, static_cast<size_t>(N) * I);
    be.linear_forward(io.tmp, io.h, w.down, nullptr, N, I, H);
    add_lora(lora_, lora_rows_, layer, io.h, {{T::kDown, io.tmp}}, N);
  }
  tp_sum(io.tmp, nH);
  be.residual_forward(io.out, io.x2, io.tmp, nH);
}

void Model::rotate_qk(const BlockTensors& w, const BlockIo& io, int N) {
  Backend& be = *backend_;
  const int D = config_.head_dim, hq = dims_.heads, hkv = dims_.kv_heads;
  if (config_.qk_norm) {  // in place is safe: each row is read before written
    be.rmsnorm_forward(io.qr, io.rstd_q, io.q, w.q_norm, N * hq, D, config_.rms_eps);
    be.rmsnorm_forward(io.kr, io.rstd_k, io.k, w.k_norm, N * hkv, D, config_.rms_eps);
  } else if (io.qr != io.q) {  // training keeps q and k for backward
    be.copy(io.qr, io.q, static_cast<size_t>(N) * dims_.q_dim() * sizeof(float));
    be.copy(io.kr, io.k, static_cast<size_t>(N) * dims_.kv_dim() * sizeof(float));
  }
  be.rope_forward(io.qr, io.pos, N, hq, D, rope_cos_, rope_sin_);
  be.rope_forward(io.kr, io.pos, N, hkv, D, rope_cos_, rope_sin_);
}

void Model::recompute_block_elementwise(int l) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  const int N = a.B * a.T, H = config_.hidden;
  const float eps = config_.rms_eps;
  const BlockTensors w = layout_.block_tensors(l, params_[layout_.block_group(l)]);
  if (engine_) return engine_->recompute(l, w, a.res[l], block_pass());
  be.rmsnorm_forward(a.xn1[l], a.rstd1[l], a.res[l], w.attn_norm, N, H, eps);
  rotate_qk(w, training_block_io(l), N);
  be.rmsnorm_forward(a.xn2[l], a.rstd2[l], a.x2[l], w.mlp_norm, N, H, eps);
  if (config_.is_moe_layer(l)) {
    const MoeIo& m = a.moe[l];
    const int rows = N * config_.moe.experts_per_token;
    // Under expert parallelism the experts' inputs are other ranks' rows,
    // kept (a gather would need the exchange again).
    if (shard_.ep_size == 1) be.gather_rows(m.xs, a.xn2[l], m.source_rows, rows, H);
    be.swiglu_forward(m.h, m.g, m.u, static_cast<size_t>(m.route->expert_rows) * dims_.expert_intermediate);
    return;
  }
  be.swiglu_forward(a.h[l], a.g[l], a.u[l], static_cast<size_t>(N) * dims_.intermediate);
}

LossSum Model::forward_head() {
  Activations& a = *acts_;
  const int N = a.B * a.T;
  if (engine_ && a.has_targets) {
    engine_->head_forward(head_tensors(), a.res[config_.layers], a.targets, a.losses, N);
  } else {
    head_logits_fp32();
  }
  LossSum loss;
  if (!a.has_targets) return loss;
  a.host_losses.resize(N);
  backend_->copy_to_host(a.host_losses.data(), a.losses, N * sizeof(float));
  for (int i = 0; i < N; ++i) {
    if (a.host_targets[i] == kIgnoreIndex) continue;
    loss.sum += a.host_losses[i];
    loss.count += 1;
  }
  if (config_.is_moe() && config_.moe.aux_loss) add_router_aux_loss(&loss);
  return loss;
}

void Model::head_logits_fp32() {
  Activations& a = *acts_;
  const int N = a.B * a.T, H = config_.hidden;
  const float* final_norm = params_[layout_.head_group()];  // model.norm.weight comes first
  backend_->rmsnorm_forward(a.xnf, a.rstdf, a.res[config_.layers], final_norm, N, H,
                            config_.rms_eps);
  COHORT_CHECK_MSG(a.has_targets || a.logit_rows >= N,
                   "a forward without targets needs every row's logits; LM-head chunking ({} rows) "
                   "is for training", a.logit_rows);
  for (int r0 = 0; r0 < N; r0 += a.logit_rows) {
    const int rows = std::min(a.logit_rows, N - r0);
    backend_->linear_forward(a.logits, a.xnf + static_cast<size_t>(r0) * H, lm_head_weight(), nullptr,
                             rows, H, dims_.vocab);
    if (!a.has_targets) break;
    // Loss only (grad_scale 0): logits stay intact for callers and for backward.
    backend_->cross_entropy_forward_backward(a.losses + r0, a.logits, a.ce_scratch, a.targets + r0, rows,
                                             dims_.vocab, dims_.vocab_begin, 0.0f,
                                             shard_.tp_size > 1 ? &tp_ : nullptr);
  }
}

}  // namespace cohort::models
