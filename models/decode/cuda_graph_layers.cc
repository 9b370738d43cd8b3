// CudaGraphEngine's layers (cuda_graph_step.cc runs them, then the head):
// the residual stream through each decoder layer, with the norms as
// kernels of their own or, at decode steps whose projections all take the
// tiles, folded into the projections.
#include <algorithm>

#include "base/check.h"
#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"
#include "models/ops/fp8_rows.h"

namespace cohort::models::decode {

void CudaGraphEngine::enqueue_layers(int n, bool decode_step) {
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const float eps = config_.rms_eps;
  const size_t nH = static_cast<size_t>(n) * H;
  namespace mc = models::cuda;
  models::cuda::embed_bf16(buf_.x, embed_, row_index_.tokens, n, H, dims_.vocab_begin, dims_.vocab,
                           stream_);
  if (decode_step && folds_norms(n)) return enqueue_folded_layers(n);
  all_reduce(buf_.x, nH);  // vocab-parallel: rows outside this rank's range were zeros
  // At one row and one rank the projections take the residual stream
  // directly: the ones that read it normalise it themselves, the output
  // projections add into it (gemv.h). With peers the partial sums must be
  // all-reduced before they reach the residual, so that path keeps the
  // separate add + RMSNorm.
  // A mixture of experts' sparse layers take the same attention half; their
  // MLP normalises into xn for the router and the experts.
  const bool fused = tp_ == 1 && !quantized_ && !lora_.on && mc::gemv_norm_supported(n, H) &&
                     mc::gemv_supported(n, Qd) && mc::gemv_supported(n, I);
  const bool in_place = tp_ == 1 && projection(n, Qd) != Projection::kCublasLt &&
                        projection(n, I) != Projection::kCublasLt;
  if (!fused) norm_into_xn(nullptr, layers_[0].attn_norm, n, &layers_[0].wqkv);
  for (int l = 0; l < config_.layers; ++l) {
    const Layer& L = layers_[l];
    if (fused) {
      mc::gemv_norm_bf16(buf_.qkv, buf_.x, L.attn_norm, eps, L.wqkv.bf16, n, H, Qd + 2 * KVd, stream_);
    } else {
      lora_shrink_ahead(l, models::LoraTarget::kQ, 3, buf_.xn, H, n);
      gemm(buf_.qkv, buf_.xn, L.wqkv, n, H, Qd + 2 * KVd);
    }
    if (lora_.on) enqueue_lora(l, models::LoraTarget::kQ, 3, buf_.qkv, Qd + 2 * KVd, buf_.xn, H, {Qd, KVd, KVd}, n);
    enqueue_attention(L, n, decode_step);
    if (fused) {
      mc::gemv_bf16(buf_.x, buf_.y, L.wo.bf16, n, Qd, H, stream_, mc::GemvOutput::kAccumulate);
      if (L.sparse) {
        enqueue_moe(L, n, buf_.x, /*norm_in_router=*/true);
        continue;
      }
      mc::gemv_norm_swiglu_bf16(buf_.h, buf_.x, L.mlp_norm, eps, L.wgu.bf16, n, H, I, stream_);
      mc::gemv_bf16(buf_.x, buf_.h, L.wdown.bf16, n, I, H, stream_, mc::GemvOutput::kAccumulate);
      continue;
    }
    // One rank whose output projections are not cuBLASLt's: they add into
    // the residual stream in place (no delta for the norm to add).
    // A served adapter's o_proj delta joins the (partial) output before
    // the ranks add theirs: its A is cut by input columns as W is. At one
    // rank whose projection writes tmp, the delta goes into the residual
    // stream itself, wholly beside the projection (residual_beside).
    float* const residual_beside = !in_place && tp_ == 1 ? buf_.x : nullptr;
    lora_shrink_ahead(l, models::LoraTarget::kO, 1, buf_.y, Qd, n, nullptr, residual_beside, H);
    if (in_place) {
      gemm(buf_.x, buf_.y, L.wo, n, Qd, H, mc::GemvOutput::kAccumulate);
      if (lora_.on) enqueue_lora(l, models::LoraTarget::kO, buf_.x, H, buf_.y, Qd, H, n);
    } else {
      gemm(buf_.tmp, buf_.y, L.wo, n, Qd, H);
      if (lora_.on) enqueue_lora(l, models::LoraTarget::kO, buf_.tmp, H, buf_.y, Qd, H, n);
      all_reduce(buf_.tmp, nH);
    }
    norm_into_xn(in_place ? nullptr : buf_.tmp, L.mlp_norm, n, L.sparse ? nullptr : &L.wgu);
    if (L.sparse) {
      // The experts' weighted outputs add into the residual, or into tmp
      // (zeroed) whose partial sums the ranks add first.
      if (!in_place) COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(buf_.tmp, 0, nH * sizeof(float), stream_));
      enqueue_moe(L, n, in_place ? buf_.x : buf_.tmp);
      if (!in_place) all_reduce(buf_.tmp, nH);
    } else {
      if (lora_.on) gate_up_lora_swiglu(l, L, n);
      else gate_up_swiglu(buf_.xn, L.wgu, n, H, I);
      float* out = in_place ? buf_.x : buf_.tmp;
      lora_shrink_ahead(l, models::LoraTarget::kDown, 1, buf_.h, I, n, nullptr, residual_beside, H);
      if (in_place) gemm(buf_.x, buf_.h, L.wdown, n, I, H, mc::GemvOutput::kAccumulate);
      else gemm(buf_.tmp, buf_.h, L.wdown, n, I, H);
      if (lora_.on) enqueue_lora(l, models::LoraTarget::kDown, out, H, buf_.h, I, H, n);
      if (!in_place) all_reduce(buf_.tmp, nH);
    }
    // The next layer's input norm, or after the last layer the final norm.
    const bool last = l + 1 == config_.layers;
    norm_into_xn(in_place ? nullptr : buf_.tmp, last ? final_norm_ : layers_[l + 1].attn_norm, n,
                 last ? nullptr : &layers_[l + 1].wqkv);
  }
  // The final norm, which the LM head reads (its vocabulary of rows is too
  // wide for every block to normalise the input itself).
  if (fused) mc::add_rmsnorm_bf16(buf_.x, nullptr, final_norm_, buf_.xn, n, H, eps, stream_);
}

// x (+= delta) normalised by `weight` into buf_.xn; where `next`, the
// projection that reads xn next, takes the FP8 tensor cores, coded for it
// in the same pass (rmsnorm.h's add_rmsnorm_e4m3), which its gemm_fp8 then
// does not repeat.
void CudaGraphEngine::norm_into_xn(const float* delta, const float* weight, int n, const Weight* next) {
  const int H = config_.hidden;
  if (next && fp8_gemm(*next, n) && models::cuda::add_rmsnorm_e4m3_supported(H)) {
    models::cuda::add_rmsnorm_e4m3(buf_.x, delta, weight, buf_.xn, fp8_x_, fp8_x_scales_, n,
                                   models::fp8_rows_padded(n), H, config_.rms_eps, stream_);
    fp8_x_holds_ = buf_.xn;
    return;
  }
  models::cuda::add_rmsnorm_bf16(buf_.x, delta, weight, buf_.xn, n, H, config_.rms_eps, stream_);
}

models::KvView CudaGraphEngine::kv_view(const Layer& L) const {
  return models::KvView{L.k_cache, L.v_cache, options_.kv_dtype == models::KvDtype::kFp8 ? L.kv_scales : nullptr,
                        calibrating_ ? L.kv_amax : nullptr};
}

// buf_.y = attention of the rows over the cache, from buf_.qkv (q/k/v
// prepared, the rows' K/V written to the cache on the way).
void CudaGraphEngine::enqueue_attention(const Layer& L, int n, bool decode_step) {
  namespace mc = models::cuda;
  const models::DecodeShape shape{dims_.heads, dims_.kv_heads, config_.head_dim, options_.capacity,
                                  config_.rms_eps, kKvBlockShift};
  const models::KvView cache = kv_view(L);
  if (decode_step && n <= fused_attention_rows_) {
    mc::decode_attention_fused(buf_.y, cache, buf_.qkv, L.qkv_bias, L.q_norm, L.k_norm, rope_cos_, rope_sin_,
                               row_index_, n, shape, attention_scratch_, stream_, 0, attention_form_);
    return;
  }
  mc::qkv_rope_cache(buf_.q, cache, buf_.qkv, L.qkv_bias, L.q_norm, L.k_norm, rope_cos_, rope_sin_, row_index_, n,
                     shape, stream_);
  // A prefill or mixed step: its leading decode rows (a mixed step's) take
  // the decode kernel, its prompt rows the prefill tiles; rows are
  // independent, so the two launches split them.
  if (!decode_step && prefill_tiles_) {
    if (decode_rows_ > 0) {
      mc::decode_attention(buf_.y, buf_.q, cache, row_index_, decode_rows_, shape, attention_scratch_, stream_, 0,
                           attention_form_);
    }
    mc::prefill_attention(buf_.y, buf_.q, cache, row_index_, buf_.rows + 3 * max_rows_, tile_count_, shape,
                          stream_, prefill_scratch_, tile_longest_);
    return;
  }
  mc::decode_attention(buf_.y, buf_.q, cache, row_index_, n, shape, attention_scratch_, stream_, 0,
                       attention_form_);
}

// A sparse layer's MLP over buf_.xn, moe_rows_ rows at a time: the router's
// logits (a projection like the others), its softmax and top k, the pairs
// sorted by expert, the active experts' SwiGLU and down projections over
// their rows (models/ops/moe_experts.h), and the weighted sum of each
// row's k outputs added into `out`. A few rows take the pair form instead
// (no sort; the top k in the experts' SwiGLU, the sum in the down
// projection's epilogue): three kernels fewer a layer where a decode step
// is mostly launches. With norm_in_router (the residual stream not yet
// normalised) one row's router normalises it itself and leaves xn for the
// experts: no norm kernel either. Every size the kernels need stays on the
// device, so a decode step captures into its graph like
// a dense one.
void CudaGraphEngine::enqueue_moe(const Layer& L, int n, float* out, bool norm_in_router) {
  namespace mc = models::cuda;
  const int H = config_.hidden, E = dims_.experts, k = config_.moe.experts_per_token;
  const int Ie = dims_.expert_intermediate;
  const Weight router{L.router, {}};
  if (norm_in_router && !(n == 1 && mc::gemv_norm_supported(n, H))) {
    norm_into_xn(nullptr, L.mlp_norm, n, nullptr);
    norm_in_router = false;
  }
  for (int r0 = 0; r0 < n; r0 += moe_rows_) {
    const int c = std::min(moe_rows_, n - r0);
    const Bf16* x = buf_.xn + static_cast<size_t>(r0) * H;
    if (norm_in_router) {
      mc::gemv_norm_bf16(moe_.logits, buf_.x, L.mlp_norm, config_.rms_eps, L.router, 1, H, E, stream_, buf_.xn);
    } else {
      gemm(moe_.logits, x, router, c, H, E);
    }
    if (mc::moe_pairs_supported(c, E, k, H, Ie)) {
      mc::moe_pairs_swiglu_bf16(moe_.h, moe_.experts, moe_.weights, x, L.experts_gu, moe_.logits, c, E, k,
                                config_.moe.normalize_top_k, H, Ie, stream_);
      mc::moe_pairs_down_add_bf16(out + static_cast<size_t>(r0) * H, moe_.h, L.experts_down, moe_.experts,
                                  moe_.weights, c, k, H, Ie, stream_);
      continue;
    }
    mc::moe_route(moe_.logits, moe_.experts, moe_.weights, moe_.offsets, moe_.source_rows, moe_.slots, c, E, k,
                  config_.moe.normalize_top_k, stream_);
    const int max_active = std::min(E, c * k);
    mc::moe_experts_swiglu_bf16(moe_.h, x, L.experts_gu, moe_.offsets, moe_.source_rows, E, max_active, H, Ie,
                                stream_);
    mc::moe_experts_down_bf16(moe_.ys, moe_.h, L.experts_down, moe_.offsets, E, max_active, H, Ie, stream_);
    mc::moe_combine_rows(out + static_cast<size_t>(r0) * H, moe_.ys, moe_.slots, moe_.weights, c, k, H, stream_);
  }
}

bool CudaGraphEngine::folds_norms(int n) const {
  namespace mc = models::cuda;
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  if (quantized_) return quant_folds_norms(n);
  // With adapters the gate/up sums leave the tiles unactivated (the
  // adapters' deltas join before the activation).
  return tp_ == 1 && !quantized_ && !config_.is_moe() && projection(n, H) == Projection::kSkinny &&
         projection(n, Qd) == Projection::kSkinny && projection(n, I) == Projection::kSkinny &&
         mc::folded_norm_supported(n, H, Qd + 2 * KVd) && mc::folded_norm_supported(n, Qd, H) &&
         (lora_.on ? mc::folded_norm_supported(n, H, 2 * I) : mc::folded_norm_supported(n, H, I, /*swiglu=*/true)) &&
         mc::folded_norm_supported(n, I, H);
}

bool CudaGraphEngine::quant_folds_norms(int n) const {
  namespace mc = models::cuda;
  if (tp_ != 1 || config_.is_moe() || lora_.on || config_.hidden % mc::kQuantNormChunk != 0) return false;
  for (const Layer& L : layers_) {
    for (const Weight* w : {&L.wqkv, &L.wo, &L.wgu, &L.wdown}) {
      if (!w->quantized() || !mc::quant_gemv_supported(w->packed, n) || !mc::quant_folded_norm_supported(w->packed, n)) {
        return false;
      }
    }
  }
  return true;
}

int CudaGraphEngine::norm_chunk() const {
  return quantized_ ? models::cuda::kQuantNormChunk : models::cuda::kNormChunk;
}

// The layers with their norms folded into the projections: the output
// projections leave each next norm's input and row sums, the input
// projections scale by them. buf_.xn then holds bf16(x * norm weight),
// not yet normalised; the head applies the final norm the same way where
// the tiles serve it, else a norm kernel finishes it.
//
// Served adapters' deltas: those of q/k/v and gate/up read xn and scale by
// the same sums; those of o_proj and down_proj add into the residual
// stream before their projection does, whose epilogue then takes the sum
// of squares of the whole new row for the next norm.
void CudaGraphEngine::enqueue_folded_layers(int n) {
  namespace mc = models::cuda;
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const float eps = config_.rms_eps;
  mc::FoldedNorm consume;
  consume.in_sumsq = buf_.sumsq, consume.eps = eps, consume.chunk = norm_chunk();
  auto produce = [&](const float* weight) {
    mc::FoldedNorm norm;
    norm.out_weight = weight, norm.out_x = buf_.xn, norm.out_sumsq = buf_.sumsq, norm.chunk = norm_chunk();
    return norm;
  };
  mc::rms_chunks_bf16(buf_.x, layers_[0].attn_norm, buf_.xn, buf_.sumsq, n, H, stream_, norm_chunk());
  for (int l = 0; l < config_.layers; ++l) {
    const Layer& L = layers_[l];
    lora_shrink_ahead(l, models::LoraTarget::kQ, 3, buf_.xn, H, n, buf_.sumsq);
    gemm(buf_.qkv, buf_.xn, L.wqkv, n, H, Qd + 2 * KVd, mc::GemvOutput::kStore, consume);
    if (lora_.on) {
      enqueue_lora(l, models::LoraTarget::kQ, 3, buf_.qkv, Qd + 2 * KVd, buf_.xn, H, {Qd, KVd, KVd}, n, buf_.sumsq);
    }
    enqueue_attention(L, n, /*decode_step=*/true);
    if (lora_.on) enqueue_lora(l, models::LoraTarget::kO, buf_.x, H, buf_.y, Qd, H, n);
    gemm(buf_.x, buf_.y, L.wo, n, Qd, H, mc::GemvOutput::kAccumulate, produce(L.mlp_norm));
    if (lora_.on) {
      gate_up_lora_swiglu(l, L, n, consume);
      enqueue_lora(l, models::LoraTarget::kDown, buf_.x, H, buf_.h, I, H, n);
    } else {
      gate_up_swiglu(buf_.xn, L.wgu, n, H, I, consume);
    }
    const float* next = l + 1 < config_.layers ? layers_[l + 1].attn_norm : final_norm_;
    gemm(buf_.x, buf_.h, L.wdown, n, I, H, mc::GemvOutput::kAccumulate, produce(next));
  }
}

void CudaGraphEngine::gate_up_lora_swiglu(int l, const Layer& L, int n, const models::cuda::FoldedNorm& norm) {
  const int H = config_.hidden, I = dims_.intermediate;
  lora_shrink_ahead(l, models::LoraTarget::kGate, 2, buf_.xn, H, n, norm.in_sumsq);
  gemm(buf_.gate_up, buf_.xn, L.wgu, n, H, 2 * I, models::cuda::GemvOutput::kStore, norm);
  if (lora_dense_swiglu(l, n, norm.in_sumsq)) return;
  enqueue_lora(l, models::LoraTarget::kGate, 2, buf_.gate_up, 2 * I, buf_.xn, H, {I, I}, n, norm.in_sumsq);
  models::cuda::swiglu_bf16(buf_.gate_up, buf_.h, n, I, stream_);
}

}  // namespace cohort::models::decode
