// Activation arenas: sized at warm-up for the largest (B, T) seen, reused after.
#include <algorithm>
#include <type_traits>

#include "base/check.h"
#include "models/activations.h"
#include "models/lora.h"
#include "models/model.h"
#include "models/spec.h"
#include "models/ops/attention.h"

namespace cohort::models {
namespace {

// Hands out consecutive slices of one backend allocation.
class Arena {
 public:
  explicit Arena(Backend* backend) : backend_(backend) {}
  // First pass counts, second pass carves: call plan() with counting=true,
  // then allocate(), then plan() again with counting=false.
  float* take(size_t n) {
    n = (n + 15) / 16 * 16;  // keep every slice 64-byte aligned
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  int32_t* take_i32(size_t n) { return reinterpret_cast<int32_t*>(take(n)); }
  size_t bytes() const { return used_ * sizeof(float); }
  void* allocate() {
    base_ = backend_->alloc_floats(used_);
    used_ = 0;
    return base_;
  }

 private:
  Backend* backend_;
  float* base_ = nullptr;
  size_t used_ = 0;
};

}  // namespace

void Model::ensure_activations(int B, int T, bool fp32_head) {
  Activations& a = *acts_;
  const int N = B * T;
  if (N <= a.capacity_tokens && T <= a.capacity_seq && (a.fp32_head || !fp32_head)) {
    return;
  }
  for (void* p : a.training_allocations) backend_->free(p);
  a.training_allocations.clear();
  engine_.reset();
  // The fused blocks take what they implement (spec.h), LoRA adapters
  // without dropout among it (dropout's masks are the op-by-op path's); any
  // other model trains op by op. Sparse layers join them when asked
  // (set_fused_moe_blocks) and the experts are all on this rank; LoRA on a
  // mixture of experts keeps its sparse layers op by op (the fused form
  // with adapters has not been checked on a GPU).
  DecoderSpec spec = DecoderSpec::of(config_);
  const bool sparse_blocks = spec.moe_mlp && fused_moe_blocks_ && shard_.ep_size == 1 && !lora_;
  if (sparse_blocks) spec.moe_mlp = false;  // run by the blocks (train_experts.cuh)
  if (fused_blocks_ && shard_.tp_size == 1 && (!lora_ || lora_->config().dropout == 0.0) &&
      check_executor(Executor::kCudaTrainBlocks, spec).is_ok()) {
    BlockEngineShape shape;
    shape.hidden = config_.hidden, shape.heads = dims_.heads, shape.kv_heads = dims_.kv_heads;
    shape.head_dim = config_.head_dim, shape.intermediate = dims_.intermediate;
    shape.qk_norm = config_.qk_norm, shape.eps = config_.rms_eps, shape.vocab = dims_.vocab;
    if (lora_) shape.lora = lora_->block_shape();
    if (sparse_blocks) {
      BlockMoeShape& moe = shape.moe;
      moe.experts = config_.moe.experts, moe.top_k = config_.moe.experts_per_token;
      moe.intermediate = dims_.expert_intermediate, moe.normalize_top_k = config_.moe.normalize_top_k;
      moe.aux_loss = config_.moe.aux_loss;
      for (int l = 0; l < config_.layers; ++l) moe.sparse.push_back(config_.is_moe_layer(l));
    }
    engine_ = backend_->make_block_engine(shape);
  }
  // With fused blocks the engine keeps what the blocks save; the model only
  // the residual stream, the head's tensors and dres.
  const bool op_blocks = engine_ == nullptr;
  // The fp32 head: the op-by-op path's, or logits without targets.
  a.fp32_head = op_blocks || fp32_head;
  const size_t n = static_cast<size_t>(N), H = config_.hidden, L = config_.layers;
  const size_t Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate, V = dims_.vocab,
               hq = dims_.heads, hkv = dims_.kv_heads;
  Arena arena(backend_);
  auto plan = [&] {
    a.tokens = arena.take_i32(n);
    a.targets = arena.take_i32(n);
    a.pos = arena.take_i32(n);
    a.res.assign(L + 1, nullptr);
    for (auto& p : a.res) p = arena.take(n * H);
    // What backward finds saved (model.h, ActivationCheckpointing); the
    // rest is one slice every layer shares and backward recomputes.
    const bool full = checkpointing_ == ActivationCheckpointing::kFull;
    const bool lean = checkpointing_ != ActivationCheckpointing::kNone;
    // Buffers of the layers `wanted` (all, the dense ones or the sparse ones).
    enum class Layers { kAll, kDense, kSparse };
    auto has = [&](Layers wanted, size_t l) {
      return wanted == Layers::kAll || config_.is_moe_layer(static_cast<int>(l)) == (wanted == Layers::kSparse);
    };
    auto per_layer_of = [&](Layers wanted, auto& v, size_t count, bool kept) {
      using Pointer = typename std::decay_t<decltype(v)>::value_type;
      v.assign(L, nullptr);
      if (!op_blocks) return;
      Pointer shared = nullptr;
      bool taken = false;  // (the counting pass's slices are all null)
      for (size_t l = 0; l < L; ++l) {
        if (!has(wanted, l)) continue;
        if (kept || !taken) shared = reinterpret_cast<Pointer>(arena.take(count)), taken = true;
        v[l] = shared;
      }
    };
    auto per_layer = [&](std::vector<float*>& v, size_t count, bool kept) {
      per_layer_of(Layers::kAll, v, count, kept);
    };
    per_layer(a.xn1, n * H, !lean), per_layer(a.rstd1, n, !full), per_layer(a.q, n * Qd, !full);
    per_layer(a.k, n * KVd, !full), per_layer(a.v, n * KVd, !full), per_layer(a.rstd_q, n * hq, !full);
    per_layer(a.rstd_k, n * hkv, !full), per_layer(a.qr, n * Qd, !lean), per_layer(a.kr, n * KVd, !lean);
    per_layer(a.lse, n * hq, !full), per_layer(a.y, n * Qd, !full), per_layer(a.x2, n * H, !full);
    per_layer(a.xn2, n * H, !lean), per_layer(a.rstd2, n, !full);
    per_layer_of(Layers::kDense, a.g, n * I, !full), per_layer_of(Layers::kDense, a.u, n * I, !full);
    per_layer_of(Layers::kDense, a.h, n * I, !lean);
    if (config_.is_moe()) {
      // A sparse layer's routing and experts (activations.h, MoeIo): kept
      // as the dense MLP's are, xs (a gather of xn2) and h recomputed under
      // selective checkpointing.
      // Under expert parallelism the experts' rows are those every rank of
      // the expert group sends here: up to ep times this rank's, kept per
      // layer (recomputing them would take the exchange again); xs, the
      // rows sent, is then not needed after the forward.
      const size_t E = config_.moe.experts, rows = n * config_.moe.experts_per_token;
      const size_t Ie = dims_.expert_intermediate, ep = size_t(shard_.ep_size), expert_rows = ep * rows;
      std::vector<float*> probs, weights, prob_sums, xs, g, u, h, ys, xe, ye;
      std::vector<int32_t*> experts, offsets, source_rows, slots;
      per_layer_of(Layers::kSparse, probs, n * E, !full), per_layer_of(Layers::kSparse, weights, rows, !full);
      per_layer_of(Layers::kSparse, experts, rows, !full), per_layer_of(Layers::kSparse, offsets, E + 1, !full);
      per_layer_of(Layers::kSparse, source_rows, rows, !full), per_layer_of(Layers::kSparse, slots, rows, !full);
      per_layer_of(Layers::kSparse, xs, rows * H, ep > 1 ? false : !lean);
      per_layer_of(Layers::kSparse, g, expert_rows * Ie, !full);
      per_layer_of(Layers::kSparse, u, expert_rows * Ie, !full), per_layer_of(Layers::kSparse, h, expert_rows * Ie, !lean);
      per_layer_of(Layers::kSparse, ys, rows * H, !full);
      float* counts = nullptr;
      if (ep > 1) {
        per_layer_of(Layers::kSparse, xe, expert_rows * H, !full);
        per_layer_of(Layers::kSparse, ye, expert_rows * H, false);
        if (op_blocks) counts = arena.take(2 * ep * size_t(dims_.experts));
      }
      // The load-balancing loss reads every layer's after the last ran.
      if (config_.moe.aux_loss) per_layer_of(Layers::kSparse, prob_sums, E, true);
      a.moe.assign(L, MoeIo{});
      a.moe_routes.resize(L);
      for (size_t l = 0; l < L; ++l) {
        MoeIo& m = a.moe[l];
        m.probs = probs[l], m.experts = experts[l], m.weights = weights[l];
        m.prob_sums = config_.moe.aux_loss ? prob_sums[l] : nullptr;
        m.offsets = offsets[l], m.source_rows = source_rows[l], m.slots = slots[l];
        m.xs = xs[l], m.ys = ys[l], m.g = g[l], m.u = u[l], m.h = h[l];
        m.xe = ep > 1 ? xe[l] : xs[l], m.ye = ep > 1 ? ye[l] : ys[l];
        m.route = &a.moe_routes[l];
        m.counts = counts;
      }
    }
    a.logit_rows = head_chunk_ > 0 ? std::min(N, head_chunk_) : N;
    a.losses = arena.take(n);
    if (a.fp32_head) {
      a.xnf = arena.take(n * H), a.rstdf = arena.take(n), a.logits = arena.take(size_t(a.logit_rows) * V);
      a.ce_scratch = arena.take(3 * n);
    } else {
      a.xnf = a.rstdf = a.logits = a.ce_scratch = nullptr;
    }
    a.dres = arena.take(n * H), a.dtmp = arena.take(n * H);
    a.moe_aux_grad = config_.is_moe() && config_.moe.aux_loss ? arena.take(config_.moe.experts) : nullptr;
    if (!op_blocks) return;
    a.tmp = arena.take(n * H);
    a.dy = arena.take(n * Qd), a.dq = arena.take(n * Qd), a.dk = arena.take(n * KVd);
    a.dv = arena.take(n * KVd), a.dk_lin = arena.take(n * KVd), a.dg = arena.take(n * I);
    a.du = arena.take(n * I), a.dh = arena.take(n * I);
    if (config_.is_moe()) {
      const size_t E = config_.moe.experts, rows = n * config_.moe.experts_per_token;
      const size_t Ie = dims_.expert_intermediate, expert_rows = size_t(shard_.ep_size) * rows;
      a.moe_dlogits = arena.take(n * E), a.moe_dweights = arena.take(rows);
      a.moe_dxs = arena.take(rows * H), a.moe_dg = arena.take(expert_rows * Ie);
      a.moe_du = arena.take(expert_rows * Ie), a.moe_dh = arena.take(expert_rows * Ie);
      if (shard_.ep_size > 1) a.moe_dye = arena.take(expert_rows * H), a.moe_dxe = arena.take(expert_rows * H);
    }
    // The fused kernels need one float per (token, head); the math path a
    // [heads, T, T] block pair.
    a.attn_scratch = arena.take(backend_->attention_runs_fused(config_.head_dim)
                                    ? n * hq
                                    : attention_scratch_floats(T, static_cast<int>(hq)));
  };
  plan();
  a.training_bytes = arena.bytes();
  a.training_allocations.push_back(arena.allocate());
  plan();
  if (engine_) {
    engine_->reserve(B, T, static_cast<int>(L), checkpointing_, a.logit_rows);
    a.training_bytes += engine_->bytes();
  }
  a.capacity_tokens = N;
  a.capacity_seq = T;
}

void Model::set_lm_head_chunk_tokens(int tokens) {
  COHORT_CHECK(tokens >= 0);
  if (tokens == head_chunk_) return;
  head_chunk_ = tokens;
  acts_->capacity_tokens = acts_->capacity_seq = 0;  // re-plan at the next forward
}

void Model::set_fused_blocks(bool on) {
  if (on == fused_blocks_) return;
  fused_blocks_ = on;
  acts_->capacity_tokens = acts_->capacity_seq = 0;  // re-plan at the next forward
}

void Model::set_fused_moe_blocks(bool on) {
  if (on == fused_moe_blocks_) return;
  fused_moe_blocks_ = on;
  acts_->capacity_tokens = acts_->capacity_seq = 0;  // re-plan at the next forward
}

void Model::set_lora(LoraAdapters* lora) {
  if (lora == lora_) return;
  lora_ = lora;
  acts_->capacity_tokens = acts_->capacity_seq = 0;  // re-plan at the next forward (the blocks' adapters)
}

void Model::set_activation_checkpointing(ActivationCheckpointing mode) {
  if (mode == checkpointing_) return;
  checkpointing_ = mode;
  acts_->capacity_tokens = acts_->capacity_seq = 0;  // re-plan at the next forward
}

const char* to_string(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::kNone: return "none";
    case ActivationCheckpointing::kSelective: return "selective";
    case ActivationCheckpointing::kFull: return "full";
  }
  return "?";
}

bool parse_activation_checkpointing(std::string_view name, ActivationCheckpointing* mode) {
  for (auto m : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                 ActivationCheckpointing::kFull}) {
    if (name == to_string(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

size_t Model::activation_bytes() const {
  return acts_->training_bytes + acts_->infer_bytes + (lora_ ? lora_->scratch_bytes() : 0);
}

}  // namespace cohort::models
