// The backward pass, group by group. Every parameter gradient accumulates
// (+=); activation-gradient scratch is zeroed before each op that adds into it.
#include <algorithm>

#include "base/check.h"
#include "models/activations.h"
#include "models/lora.h"
#include "models/model.h"

namespace cohort::models {

void Model::backward_head(float grad_scale) {
  Activations& a = *acts_;
  COHORT_CHECK_MSG(a.has_targets, "backward needs a forward pass with targets");
  Backend& be = *backend_;
  const int N = a.B * a.T, H = config_.hidden;
  const int head = layout_.head_group();
  if (config_.is_moe() && config_.moe.aux_loss) prepare_router_aux_grad(grad_scale);
  if (engine_) {
    // A frozen base (LoRA) has no head gradients: head_tensors() passes null
    // ones, and the engine then computes only the input gradient.
    return engine_->head_backward(head_tensors(), a.res[config_.layers], a.targets, grad_scale,
                                  a.dres, N);
  }
  be.zero(a.dtmp, static_cast<size_t>(N) * H * sizeof(float));
  for (int r0 = 0; r0 < N; r0 += a.logit_rows) {
    const int rows = std::min(a.logit_rows, N - r0);
    const float* xnf = a.xnf + static_cast<size_t>(r0) * H;
    // Chunked, the buffer holds the last chunk's logits only: again.
    if (a.logit_rows < N) be.linear_forward(a.logits, xnf, lm_head_weight(), nullptr, rows, H, dims_.vocab);
    // logits become grad_scale * (softmax - onehot), in place.
    be.cross_entropy_forward_backward(a.losses + r0, a.logits, a.ce_scratch, a.targets + r0, rows,
                                      dims_.vocab, dims_.vocab_begin, grad_scale,
                                      shard_.tp_size > 1 ? &tp_ : nullptr);
    be.linear_backward(a.dtmp + static_cast<size_t>(r0) * H, lm_head_grad(), nullptr, a.logits, xnf,
                       lm_head_weight(), rows, H, dims_.vocab);
  }
  tp_sum(a.dtmp, static_cast<size_t>(N) * H);
  be.zero(a.dres, static_cast<size_t>(N) * H * sizeof(float));
  be.rmsnorm_backward(a.dres, grads_[head], a.dtmp, a.res[config_.layers], params_[head], a.rstdf,
                      N, H);
}

void Model::block_mlp_backward(int l, const BlockTensors& w, const BlockTensors& dw) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  const int N = a.B * a.T, H = config_.hidden, I = dims_.intermediate;
  const size_t nI = static_cast<size_t>(N) * I;
  be.zero(a.dh, nI * sizeof(float));
  be.linear_backward(a.dh, dw.down, nullptr, a.dres, a.h[l], w.down, N, I, H);
  using T = LoraTarget;
  if (lora_) lora_->backward(l, a.h[l], a.dh, {{T::kDown, a.dres}}, N);
  be.zero(a.dg, nI * sizeof(float));
  be.zero(a.du, nI * sizeof(float));
  be.swiglu_backward(a.dg, a.du, a.dh, a.g[l], a.u[l], nI);
  be.zero(a.dtmp, static_cast<size_t>(N) * H * sizeof(float));
  be.linear_backward(a.dtmp, dw.gate, nullptr, a.dg, a.xn2[l], w.gate, N, H, I);
  be.linear_backward(a.dtmp, dw.up, nullptr, a.du, a.xn2[l], w.up, N, H, I);
  if (lora_) lora_->backward(l, a.xn2[l], a.dtmp, {{T::kGate, a.dg}, {T::kUp, a.du}}, N);
  tp_sum(a.dtmp, static_cast<size_t>(N) * H);
  // dres (the gradient of x2 through the residual) gains the MLP branch.
  be.rmsnorm_backward(a.dres, dw.mlp_norm, a.dtmp, a.x2[l], w.mlp_norm, a.rstd2[l], N, H);
}

void Model::block_attention_backward(int l, const BlockTensors& w, const BlockTensors& dw) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  const int N = a.B * a.T, H = config_.hidden, D = config_.head_dim;
  const int hq = dims_.heads, hkv = dims_.kv_heads, Qd = dims_.q_dim(), KVd = dims_.kv_dim();
  const size_t nQ = static_cast<size_t>(N) * Qd, nKV = static_cast<size_t>(N) * KVd;
  be.zero(a.dy, nQ * sizeof(float));
  be.linear_backward(a.dy, dw.o, nullptr, a.dres, a.y[l], w.o, N, Qd, H);
  using T = LoraTarget;
  if (lora_) lora_->backward(l, a.y[l], a.dy, {{T::kO, a.dres}}, N);
  be.zero(a.dq, nQ * sizeof(float));
  be.zero(a.dk, nKV * sizeof(float));
  be.zero(a.dv, nKV * sizeof(float));
  be.attention_backward(a.dq, a.dk, a.dv, a.attn_scratch, a.dy, a.y[l], a.qr[l], a.kr[l], a.v[l], a.lse[l],
                        a.B, a.T, hq, hkv, D);
  be.rope_backward(a.dq, a.pos, N, hq, D, rope_cos_, rope_sin_);
  be.rope_backward(a.dk, a.pos, N, hkv, D, rope_cos_, rope_sin_);
  float* dq_lin = a.dq;
  float* dk_lin = a.dk;
  if (config_.qk_norm) {
    // dy is free again: it receives the gradient of the pre-norm queries.
    be.zero(a.dy, nQ * sizeof(float));
    be.rmsnorm_backward(a.dy, dw.q_norm, a.dq, a.q[l], w.q_norm, a.rstd_q[l], N * hq, D);
    be.zero(a.dk_lin, nKV * sizeof(float));
    be.rmsnorm_backward(a.dk_lin, dw.k_norm, a.dk, a.k[l], w.k_norm, a.rstd_k[l], N * hkv, D);
    dq_lin = a.dy;
    dk_lin = a.dk_lin;
  }
  be.zero(a.dtmp, static_cast<size_t>(N) * H * sizeof(float));
  be.linear_backward(a.dtmp, dw.q, dw.q_bias, dq_lin, a.xn1[l], w.q, N, H, Qd);
  be.linear_backward(a.dtmp, dw.k, dw.k_bias, dk_lin, a.xn1[l], w.k, N, H, KVd);
  be.linear_backward(a.dtmp, dw.v, dw.v_bias, a.dv, a.xn1[l], w.v, N, H, KVd);
  if (lora_)
    lora_->backward(l, a.xn1[l], a.dtmp, {{T::kQ, dq_lin}, {T::kK, dk_lin}, {T::kV, a.dv}}, N);
  tp_sum(a.dtmp, static_cast<size_t>(N) * H);
  be.rmsnorm_backward(a.dres, dw.attn_norm, a.dtmp, a.res[l], w.attn_norm, a.rstd1[l], N, H);
}

// On entry acts_->dres holds d loss / d res[l+1]; on exit d loss / d res[l].
void Model::backward_block(int l) {
  const int g = layout_.block_group(l);
  COHORT_CHECK_MSG(grads_[g] != nullptr || lora_, "group {} has no gradient buffer", g);
  // What forward did not keep (model.h, ActivationCheckpointing): the
  // block's own forward again, or its elementwise part, from what it did.
  if (checkpointing_ == ActivationCheckpointing::kFull) forward_block(l);
  if (checkpointing_ == ActivationCheckpointing::kSelective) recompute_block_elementwise(l);
  const BlockTensors w = layout_.block_tensors(l, params_[g]);
  // No gradient buffer: the base is frozen under LoRA adapters (set_lora).
  const BlockTensors dw = grads_[g] ? layout_.block_tensors(l, grads_[g]) : BlockTensors{};
  if (engine_) {
    const BlockAdapters adapters = lora_ ? lora_->block(l) : BlockAdapters{};
    return engine_->backward(l, w, dw, acts_->dres, acts_->res[l], block_pass(), lora_ ? &adapters : nullptr);
  }
  if (config_.is_moe_layer(l)) {
    block_moe_backward(l, w, dw);
  } else {
    block_mlp_backward(l, w, dw);
  }
  block_attention_backward(l, w, dw);
}

void Model::backward_embedding() {
  if (!grads_[ParamLayout::kEmbedGroup]) return;  // a frozen base (LoRA)
  Activations& a = *acts_;
  backend_->embedding_backward(grads_[ParamLayout::kEmbedGroup], a.dres, a.tokens, a.B * a.T,
                               config_.hidden, dims_.vocab_begin, dims_.vocab);
}

}  // namespace cohort::models
