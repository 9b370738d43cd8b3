// The fused training blocks (models/block_engine.h) on CUDA: per block, five
// bf16 GEMMs forward (QKV, O, gate|up, down) and nine backward, the fused
// attention on bf16 tensors, and the elementwise kernels of
// models/ops/train_bf16.cuh.
//
// Layouts, per block (N = B * T tokens, ld = (heads + 2 kv_heads) * D):
//   qkv, rotated, dqkv  [N, ld]  q heads, then k, then v: the output of one
//                                GEMM against the stacked q|k|v weights
//                                (adjacent in the block's group), and the
//                                input of one GEMM back
//   gu, dgu             [N, 2I]  gate | up, the same for the MLP
//   y, dy [N, heads * D]; xn, tmp, dxn [N, hidden]; h, dh [N, I]
// The head keeps the final norm's output in bf16 and each row's log-sum-exp;
// its logits are bf16, head_rows rows at a time.
// Saved per layer in bf16: xn1, qkv, rotated, y, xn2, gu, h; in fp32: x2
// (the residual stream after attention), the norms' rstd and attention's
// log-sum-exp. Selective checkpointing keeps qkv, y, x2, gu and the small
// vectors, recomputing xn1, rotated, xn2 and h; full keeps none (the model
// runs forward(l) again before backward(l)).
// LoRA adapters: per targeted projection u = A x [N, rank] (bf16, saved
// per layer as the projection's input is), then y += scale · u Bᵀ into the
// projection's output; backward dB += scale · dyᵀ u, du = scale · dy B,
// dA += duᵀ x, dx += du A. The layer's adapter group is rounded to bf16
// once per forward and once per backward.
// A sparse layer (BlockMoeShape) keeps no gu or h of its own: its router and
// experts are train_experts.cuh's, on the same xn2, into the same tmp.
#include "models/cuda/train_blocks.h"

#include <algorithm>
#include <vector>

#include "models/cuda/common.cuh"
#include "models/cuda/cudnn_attention.h"
#include "models/model.h"
#include "models/ops/flash_attention.cuh"
#include "models/ops/train_bf16.cuh"
#include "models/cuda/train_experts.cuh"

namespace cohort::models::cuda {
namespace {

using train::bf16;
constexpr int kRowThreads = 128;   // one block per row of the norms
constexpr int kLossThreads = 512;  // one block per row of logits

struct Saved {
  float *rstd1 = nullptr, *rstd_q = nullptr, *rstd_k = nullptr, *lse = nullptr, *x2 = nullptr,
        *rstd2 = nullptr;
  bf16 *xn1 = nullptr, *qkv = nullptr, *rotated = nullptr, *y = nullptr, *xn2 = nullptr,
       *gu = nullptr, *h = nullptr;
  bf16* lora_u = nullptr;  // [targets][tokens, rank]: A x of each adapter
};

// LoraTarget's order (models/lora_config.h).
enum AdapterTarget { kQ, kK, kV, kO, kGate, kUp, kDown };

unsigned stride_grid(size_t work, unsigned per_block, unsigned cap) {
  return static_cast<unsigned>(std::clamp<size_t>((work + per_block - 1) / per_block, 1, cap));
}

class TrainBlocks final : public BlockEngine {
 public:
  TrainBlocks(const BlockEngineShape& shape, TrainBlocksContext context)
      : s_(shape), c_(std::move(context)),
        sparse_(SparseContext{c_.backend, c_.blas, c_.stream, c_.times, s_.hidden, s_.moe}) {
    ld_ = (s_.heads + 2 * s_.kv_heads) * s_.head_dim;
    qd_ = s_.heads * s_.head_dim;
    kvd_ = s_.kv_heads * s_.head_dim;
    for (int t = 0, next = 0; t < kAdapterTargets; ++t) {
      u_index_[t] = s_.lora.a[t] != kNoAdapter ? next++ : -1;
    }
    if (c_.attention != AttentionBackend::kFlash) {
      auto made = CudnnAttention::create();
      if (made.is_ok()) {
        cudnn_ = std::move(made).value();
      } else if (c_.attention == AttentionBackend::kCudnn) {
        COHORT_CHECK_MSG(false, "model.attention = \"cudnn\": {}", made.status().message());
      } else {
        spdlog::info("attention: the flash kernels (cuDNN: {})", made.status().message());
      }
    }
  }
  ~TrainBlocks() override {
    if (arena_) c_.backend->free(arena_);
    if (head_weights_) c_.backend->free(head_weights_);
  }

  void reserve(int B, int T, int layers, ActivationCheckpointing mode, int head_rows) override {
    const size_t n = static_cast<size_t>(B) * T;
    if (arena_ && n <= tokens_ && T <= seq_ && layers <= layers_ && mode == mode_ &&
        head_rows == head_rows_) {
      return;
    }
    if (arena_) c_.backend->free(arena_);
    arena_ = nullptr;
    tokens_ = n, seq_ = T, layers_ = layers, mode_ = mode, head_rows_ = head_rows;
    cudnn_workspace_bytes_ = 0;
    if (cudnn_) {
      const CudnnAttentionShape shape = cudnn_shape(B, T);
      const Status st = cudnn_->prepare(shape);
      if (st.is_ok()) {
        cudnn_workspace_bytes_ = cudnn_->workspace_bytes(shape);
        spdlog::info("attention: {}", cudnn_->describe());
      } else if (c_.attention == AttentionBackend::kCudnn) {
        COHORT_CHECK_MSG(false, "model.attention = \"cudnn\": {}", st.message());
      } else {
        spdlog::warn("attention: the flash kernels, as {}", st.message());
      }
    }
    plan(n, layers, mode);                           // count
    arena_ = c_.backend->alloc(used_);
    plan(n, layers, mode);                           // carve
  }
  size_t bytes() const override { return used_ + head_weight_bytes_; }
  BlockMoeStats moe_stats(int l) const override { return sparse_.stats(l); }

  void head_forward(const HeadTensors& h, const float* res, const int32_t* targets, float* losses,
                    int N) override {
    const int H = s_.hidden, V = s_.vocab;
    norm(nullptr, xnf_, rstdf_, res, nullptr, h.norm, N);
    const bf16* w = head_weight(h.weight);
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
      const int rows = std::min(head_rows_, N - r0);
      linear_forward(logits_, xnf_ + size_t(r0) * H, w, rows, H, V);
      OpTimes::Scope timed(c_.times, "blocks.cross_entropy", c_.stream);
      train::cross_entropy_forward_kernel<kLossThreads><<<rows, kLossThreads, 0, c_.stream>>>(
          losses + r0, lse_head_ + r0, logits_, targets + r0, V);
      check();
    }
  }

  void head_backward(const HeadTensors& h, const float* res, const int32_t* targets,
                     float grad_scale, float* dres, int N) override {
    const int H = s_.hidden, V = s_.vocab;
    const bf16* w = head_weight(h.weight);
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
      const int rows = std::min(head_rows_, N - r0);
      // Chunked, the buffer holds the last chunk's logits only: again.
      if (head_rows_ < N) linear_forward(logits_, xnf_ + size_t(r0) * H, w, rows, H, V);
      {
        OpTimes::Scope timed(c_.times, "blocks.cross_entropy", c_.stream);
        train::cross_entropy_backward_kernel<kLossThreads><<<rows, kLossThreads, 0, c_.stream>>>(
            logits_, lse_head_ + r0, targets + r0, V, grad_scale);
        check();
      }
      linear_backward(dxn_ + size_t(r0) * H, h.dweight, logits_, xnf_ + size_t(r0) * H, w, rows, H,
                      V);
    }
    COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(dres, 0, size_t(N) * H * sizeof(float), c_.stream));
    norm_backward(dres, nullptr, h.dnorm, res, h.norm, rstdf_, N);
  }

  void forward(int l, const BlockTensors& w, const float* res_in, float* res_out,
               const BlockPass& pass, const BlockAdapters* lora) override {
    const Saved& a = saved_[l];
    const int N = pass.B * pass.T, H = s_.hidden, I = s_.intermediate;
    if (lora) round_adapters(*lora);
    norm(nullptr, a.xn1, a.rstd1, res_in, nullptr, w.attn_norm, N);
    linear_forward(a.qkv, a.xn1, weight(w.q, size_t(ld_) * H), N, H, ld_);
    if (lora) {
      lora_forward(*lora, a, kQ, a.xn1, H, a.qkv, ld_, qd_, N);
      lora_forward(*lora, a, kK, a.xn1, H, a.qkv + qd_, ld_, kvd_, N);
      lora_forward(*lora, a, kV, a.xn1, H, a.qkv + qd_ + kvd_, ld_, kvd_, N);
    }
    rotate(a, w, N, pass);
    {
      OpTimes::Scope timed(c_.times, "blocks.attention_forward", c_.stream);
      const flash::Shape sh = attention_shape(pass.T);
      if (uses_cudnn(pass)) {
        const Status st = cudnn_->forward(c_.stream, cudnn_shape(pass), a.y, a.lse, a.rotated,
                                          a.rotated + qd_, a.rotated + qd_ + kvd_, cudnn_workspace_);
        COHORT_CHECK_MSG(st.is_ok(), "{}", st.to_string());
      } else if (s_.head_dim == 64) {
        flash_forward_launch<64>(c_.stream, a.y, a.lse, a.rotated, a.rotated + qd_,
                                 a.rotated + qd_ + kvd_, pass.B, sh);
      } else {
        flash_forward_launch<128>(c_.stream, a.y, a.lse, a.rotated, a.rotated + qd_,
                                  a.rotated + qd_ + kvd_, pass.B, sh);
      }
      check();
    }
    linear_forward(tmp_, a.y, weight(w.o, size_t(H) * qd_), N, qd_, H);
    if (lora) lora_forward(*lora, a, kO, a.y, qd_, tmp_, H, H, N);
    norm(a.x2, a.xn2, a.rstd2, res_in, tmp_, w.mlp_norm, N);
    if (s_.moe.sparse_layer(l)) {
      sparse_.forward(l, router_weight(w), experts_weight(w), a.xn2, tmp_, N);
    } else {
      linear_forward(a.gu, a.xn2, weight(w.gate, size_t(2) * I * H), N, H, 2 * I);
      if (lora) {
        lora_forward(*lora, a, kGate, a.xn2, H, a.gu, 2 * I, I, N);
        lora_forward(*lora, a, kUp, a.xn2, H, a.gu + I, 2 * I, I, N);
      }
      swiglu(a, N);
      linear_forward(tmp_, a.h, weight(w.down, size_t(H) * I), N, I, H);
      if (lora) lora_forward(*lora, a, kDown, a.h, I, tmp_, H, H, N);
    }
    OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
    const size_t nh = static_cast<size_t>(N) * H;
    train::add_bf16_kernel<<<stride_grid(nh / 4, kThreads, 4096), kThreads, 0, c_.stream>>>(
        res_out, a.x2, tmp_, nh);
    check();
  }

  void recompute(int l, const BlockTensors& w, const float* res_in, const BlockPass& pass) override {
    const Saved& a = saved_[l];
    const int N = pass.B * pass.T;
    norm(nullptr, a.xn1, a.rstd1, res_in, nullptr, w.attn_norm, N);
    rotate(a, w, N, pass);
    norm(nullptr, a.xn2, a.rstd2, a.x2, nullptr, w.mlp_norm, N);
    if (s_.moe.sparse_layer(l)) {
      sparse_.recompute(l, a.xn2, N);
    } else {
      swiglu(a, N);
    }
  }

  void backward(int l, const BlockTensors& w, const BlockTensors& dw, float* dres,
                const float* res_in, const BlockPass& pass, const BlockAdapters* lora) override {
    const Saved& a = saved_[l];
    const int N = pass.B * pass.T, H = s_.hidden, I = s_.intermediate;
    const size_t nh = static_cast<size_t>(N) * H;
    if (lora) round_adapters(*lora);
    {
      OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
      train::to_bf16_kernel<<<stride_grid(nh / 4, kThreads, 4096), kThreads, 0, c_.stream>>>(
          dres_half_, dres, nh);
      check();
    }
    if (s_.moe.sparse_layer(l)) {
      sparse_.backward(l, router_weight(w), experts_weight(w), dw.router, dw.experts, dres_half_, a.xn2, dxn_, N,
                       pass.moe_aux_grad);
    } else {
      // MLP: res_out = x2 + down(swiglu(gate|up(norm(x2)))).
      const bf16* w_down = weight(w.down, size_t(H) * I);
      linear_backward(dh_, dw.down, dres_half_, a.h, w_down, N, I, H);
      if (lora) lora_backward(*lora, a, kDown, a.h, I, dres_half_, H, H, dh_, N);
      {
        OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
        const size_t pieces = static_cast<size_t>(N) * I / 8;
        train::swiglu_backward_kernel<<<stride_grid(pieces, kThreads, 8192), kThreads, 0, c_.stream>>>(
            dgu_, dh_, a.gu, N, I);
        check();
      }
      linear_backward(dxn_, dw.gate, dgu_, a.xn2, weight(w.gate, size_t(2) * I * H), N, H, 2 * I);
      if (lora) {
        lora_backward(*lora, a, kGate, a.xn2, H, dgu_, 2 * I, I, dxn_, N);
        lora_backward(*lora, a, kUp, a.xn2, H, dgu_ + I, 2 * I, I, dxn_, N);
      }
    }
    norm_backward(dres, dres_half_, dw.mlp_norm, a.x2, w.mlp_norm, a.rstd2, N);
    // Attention: x2 = res_in + o(attention(rope(norm(qkv(norm(res_in)))))).
    linear_backward(dy_, dw.o, dres_half_, a.y, weight(w.o, size_t(H) * qd_), N, qd_, H);
    if (lora) lora_backward(*lora, a, kO, a.y, qd_, dres_half_, H, H, dy_, N);
    {
      OpTimes::Scope timed(c_.times, "blocks.attention_backward", c_.stream);
      const flash::Shape sh = attention_shape(pass.T);
      const bf16* q = a.rotated;
      if (uses_cudnn(pass)) {
        const Status st = cudnn_->backward(c_.stream, cudnn_shape(pass), dqkv_, dqkv_ + qd_,
                                           dqkv_ + qd_ + kvd_, dy_, q, q + qd_, q + qd_ + kvd_, a.y,
                                           a.lse, cudnn_workspace_);
        COHORT_CHECK_MSG(st.is_ok(), "{}", st.to_string());
      } else if (s_.head_dim == 64) {
        flash_backward_launch<64>(c_.stream, dqkv_, dqkv_ + qd_, dqkv_ + qd_ + kvd_, dsum_, dy_,
                                  q, q + qd_, q + qd_ + kvd_, a.y, a.lse, pass.B, sh);
      } else {
        flash_backward_launch<128>(c_.stream, dqkv_, dqkv_ + qd_, dqkv_ + qd_ + kvd_, dsum_, dy_,
                                   q, q + qd_, q + qd_ + kvd_, a.y, a.lse, pass.B, sh);
      }
      check();
    }
    {
      OpTimes::Scope timed(c_.times, "blocks.norm_rope", c_.stream);
      const size_t rows = static_cast<size_t>(N) * (s_.heads + s_.kv_heads);
      const unsigned grid = stride_grid(rows, kThreads / 32, 528);
      const train::QkvShape qs{s_.heads, s_.kv_heads, s_.head_dim, ld_, s_.eps};
      const float* qn = s_.qk_norm ? w.q_norm : nullptr;
      const float* kn = s_.qk_norm ? w.k_norm : nullptr;
      if (s_.head_dim == 64) {
        train::qk_norm_rope_backward_kernel<64><<<grid, kThreads, 0, c_.stream>>>(
            dqkv_, dw.q_norm, dw.k_norm, a.qkv, a.rstd_q, a.rstd_k, qn, kn, pass.pos, pass.cos,
            pass.sin, N, qs);
      } else {
        train::qk_norm_rope_backward_kernel<128><<<grid, kThreads, 0, c_.stream>>>(
            dqkv_, dw.q_norm, dw.k_norm, a.qkv, a.rstd_q, a.rstd_k, qn, kn, pass.pos, pass.cos,
            pass.sin, N, qs);
      }
      check();
    }
    linear_backward(dxn_, dw.q, dqkv_, a.xn1, weight(w.q, size_t(ld_) * H), N, H, ld_);
    if (lora) {
      lora_backward(*lora, a, kQ, a.xn1, H, dqkv_, ld_, qd_, dxn_, N);
      lora_backward(*lora, a, kK, a.xn1, H, dqkv_ + qd_, ld_, kvd_, dxn_, N);
      lora_backward(*lora, a, kV, a.xn1, H, dqkv_ + qd_ + kvd_, ld_, kvd_, dxn_, N);
    }
    norm_backward(dres, nullptr, dw.attn_norm, res_in, w.attn_norm, a.rstd1, N);
  }

 private:
  // Two passes over the same list: the first (arena_ null) only counts.
  void plan(size_t n, int layers, ActivationCheckpointing mode) {
    used_ = 0;
    const size_t H = s_.hidden, I = s_.intermediate, hq = s_.heads, hkv = s_.kv_heads;
    const bool full = mode == ActivationCheckpointing::kFull;
    const bool lean = mode != ActivationCheckpointing::kNone;
    saved_.assign(layers, Saved{});
    // A tensor every layer keeps, or one slot they all share.
    auto per_layer = [&](auto member, size_t count, bool kept) {
      using Ptr = std::remove_reference_t<decltype(saved_[0].*member)>;
      Ptr shared = kept ? nullptr : take<std::remove_pointer_t<Ptr>>(count);
      for (Saved& s : saved_) s.*member = kept ? take<std::remove_pointer_t<Ptr>>(count) : shared;
    };
    per_layer(&Saved::rstd1, n, !full), per_layer(&Saved::xn1, n * H, !lean);
    per_layer(&Saved::qkv, n * ld_, !full), per_layer(&Saved::rstd_q, n * hq, !full);
    per_layer(&Saved::rstd_k, n * hkv, !full), per_layer(&Saved::rotated, n * ld_, !lean);
    per_layer(&Saved::lse, n * hq, !full), per_layer(&Saved::y, n * qd_, !full);
    per_layer(&Saved::x2, n * H, !full), per_layer(&Saved::rstd2, n, !full);
    per_layer(&Saved::xn2, n * H, !lean);
    // The dense MLP's tensors, in dense layers only.
    auto per_dense_layer = [&](auto member, size_t count, bool kept) {
      using Ptr = std::remove_reference_t<decltype(saved_[0].*member)>;
      Ptr shared = nullptr;
      bool taken = false;  // (the counting pass's slices are all null)
      for (int l = 0; l < layers; ++l) {
        if (s_.moe.sparse_layer(l)) continue;
        if (kept || !taken) shared = take<std::remove_pointer_t<Ptr>>(count), taken = true;
        saved_[l].*member = shared;
      }
    };
    per_dense_layer(&Saved::gu, n * 2 * I, !full), per_dense_layer(&Saved::h, n * I, !lean);
    if (s_.moe.experts > 0) sparse_.plan([&](size_t bytes) { return take<char>(bytes); }, n, layers, full, lean);
    const size_t r = static_cast<size_t>(s_.lora.rank), targets = static_cast<size_t>(s_.lora.targets());
    if (r > 0) {
      per_layer(&Saved::lora_u, targets * n * r, !full);
      lora_du_ = take<bf16>(n * r);
      lora_weights_ = take<bf16>(s_.lora.group_numel);
    }
    tmp_ = take<bf16>(n * H), dres_half_ = take<bf16>(n * H), dxn_ = take<bf16>(n * H);
    dy_ = take<bf16>(n * qd_), dqkv_ = take<bf16>(n * ld_), dh_ = take<bf16>(n * I);
    dgu_ = take<bf16>(n * 2 * I), dsum_ = take<float>(n * hq);
    weights_ = take<bf16>(std::max({size_t(ld_) * H, 2 * I * H, H * size_t(qd_), size_t(s_.moe.experts) * H}));
    xnf_ = take<bf16>(n * H), rstdf_ = take<float>(n), lse_head_ = take<float>(n);
    logits_ = take<bf16>(size_t(std::min<size_t>(head_rows_, n)) * s_.vocab);
    cudnn_workspace_ = cudnn_workspace_bytes_ ? take<char>(cudnn_workspace_bytes_) : nullptr;
  }
  const bf16* router_weight(const BlockTensors& w) { return weight(w.router, size_t(s_.moe.experts) * s_.hidden); }
  const bf16* experts_weight(const BlockTensors& w) {
    return bf16_operand(w.experts, sparse_.experts_numel(), sparse_.experts_scratch());
  }

  template <typename T>
  T* take(size_t count) {
    const size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
    T* p = arena_ ? reinterpret_cast<T*>(static_cast<char*>(arena_) + used_) : nullptr;
    used_ += bytes;
    return p;
  }

  static void check() { COHORT_CUDA_CHECK_FATAL(cudaGetLastError()); }

  CudnnAttentionShape cudnn_shape(int B, int T) const {
    return {B, T, s_.heads, s_.kv_heads, s_.head_dim, ld_, qd_};
  }
  CudnnAttentionShape cudnn_shape(const BlockPass& pass) const { return cudnn_shape(pass.B, pass.T); }
  // cuDNN serves a pass whose shape it has plans for and whose workspace
  // fits the one reserved (another shape, such as a short evaluation batch,
  // gets its plans here, once); the flash kernels serve the rest.
  bool uses_cudnn(const BlockPass& pass) {
    if (!cudnn_ || !cudnn_workspace_) return false;
    const CudnnAttentionShape shape = cudnn_shape(pass);
    return cudnn_->prepare(shape).is_ok() && cudnn_->workspace_bytes(shape) <= cudnn_workspace_bytes_;
  }

  flash::Shape attention_shape(int T) const {
    return {T, s_.heads, s_.kv_heads, 1.0f / sqrtf(float(s_.head_dim)), ld_, ld_, qd_};
  }

  // A weight operand in bf16: its working copy, or the masters rounded now
  // into `scratch`.
  const bf16* bf16_operand(const float* w, size_t n, bf16* scratch) {
    if (c_.working_bf16) {
      if (const void* hit = c_.working_bf16(w, n)) return static_cast<const bf16*>(hit);
    }
    OpTimes::Scope timed(c_.times, "blocks.weight_cast", c_.stream);
    train::to_bf16_kernel<<<stride_grid(n / 4, kThreads, 4096), kThreads, 0, c_.stream>>>(
        scratch, w, n);
    check();
    return scratch;
  }
  const bf16* weight(const float* w, size_t n) { return bf16_operand(w, n, weights_); }
  // The LM head's scratch is a buffer of its own, made at the first step
  // that needs it (as the arena is), so that the block weights' stays small.
  const bf16* head_weight(const float* w) {
    const size_t n = size_t(s_.vocab) * s_.hidden;
    const bool registered = c_.working_bf16 && c_.working_bf16(w, n);
    if (!registered && !head_weights_) {
      head_weight_bytes_ = n * sizeof(bf16);
      head_weights_ = static_cast<bf16*>(c_.backend->alloc(head_weight_bytes_));
    }
    return bf16_operand(w, n, head_weights_);
  }

  // Row-major y = x W^T is column-major y^T = W x^T: operands swapped.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16* a,
            int lda, const bf16* b, int ldb, void* c, cudaDataType_t c_type, int ldc, float beta,
            float alpha = 1.0f) {
    train::gemm_bf16(c_.blas, ta, tb, m, n, k, a, lda, b, ldb, c, c_type, ldc, beta, alpha);
  }
  void linear_forward(bf16* y, const bf16* x, const bf16* w, int n, int in, int out) {
    OpTimes::Scope timed(c_.times, "blocks.linear_forward", c_.stream);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, y, CUDA_R_16BF, out, 0.0f);
  }
  // dx = dy W (overwritten, bf16); dw += dy^T x (fp32), unless dw is null
  // (a frozen weight).
  void linear_backward(bf16* dx, float* dw, const bf16* dy, const bf16* x, const bf16* w, int n,
                       int in, int out) {
    OpTimes::Scope timed(c_.times, "blocks.linear_backward", c_.stream);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out, dx, CUDA_R_16BF, in, 0.0f);
    if (dw) gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, dw, CUDA_R_32F, in, 1.0f);
  }

  // The adapters' bf16 operands: the layer's whole group at once.
  void round_adapters(const BlockAdapters& lora) {
    OpTimes::Scope timed(c_.times, "blocks.weight_cast", c_.stream);
    const size_t n = s_.lora.group_numel;
    train::round_to_bf16_kernel<<<stride_grid(n, kThreads, 1024), kThreads, 0, c_.stream>>>(lora_weights_, lora.params,
                                                                                      n);
    check();
  }
  bf16* adapter_u(const Saved& a, int t) const {
    return a.lora_u + static_cast<size_t>(u_index_[t]) * tokens_ * s_.lora.rank;
  }
  // y [N, out] (row stride ldy) += scale · (x A_tᵀ) B_tᵀ, x [N, in]; u = x A_tᵀ kept.
  void lora_forward(const BlockAdapters& lora, const Saved& a, int t, const bf16* x, int in, bf16* y, int ldy,
                    int out, int N) {
    if (u_index_[t] < 0) return;
    OpTimes::Scope timed(c_.times, "blocks.lora", c_.stream);
    const int r = s_.lora.rank;
    const bf16* A = lora_weights_ + s_.lora.a[t];
    const bf16* B = lora_weights_ + s_.lora.b[t];
    bf16* u = adapter_u(a, t);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, r, N, in, A, in, x, in, u, CUDA_R_16BF, r, 0.0f);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out, N, r, B, r, u, r, y, CUDA_R_16BF, ldy, 1.0f, lora.scale);
  }
  // With dy [N, out] (row stride ldy) the projection's output gradient:
  // dB += scale · dyᵀ u, du = scale · dy B, dA += duᵀ x, dx [N, in] += du A.
  void lora_backward(const BlockAdapters& lora, const Saved& a, int t, const bf16* x, int in, const bf16* dy,
                     int ldy, int out, bf16* dx, int N) {
    if (u_index_[t] < 0) return;
    OpTimes::Scope timed(c_.times, "blocks.lora", c_.stream);
    const int r = s_.lora.rank;
    const bf16* A = lora_weights_ + s_.lora.a[t];
    const bf16* B = lora_weights_ + s_.lora.b[t];
    const bf16* u = adapter_u(a, t);
    float* dA = lora.grads + s_.lora.a[t];
    float* dB = lora.grads + s_.lora.b[t];
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, r, out, N, u, r, dy, ldy, dB, CUDA_R_32F, r, 1.0f, lora.scale);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, r, N, out, B, r, dy, ldy, lora_du_, CUDA_R_16BF, r, 0.0f, lora.scale);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, r, N, x, in, lora_du_, r, dA, CUDA_R_32F, in, 1.0f);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, N, r, A, in, lora_du_, r, dx, CUDA_R_16BF, in, 1.0f);
  }

  void norm(float* x_out, bf16* xn, float* rstd, const float* a, const bf16* delta, const float* w,
            int N) {
    OpTimes::Scope timed(c_.times, "blocks.norm", c_.stream);
    train::add_rmsnorm_kernel<kRowThreads><<<N, kRowThreads, 0, c_.stream>>>(
        x_out, xn, rstd, a, delta, w, s_.hidden, s_.eps);
    check();
  }
  void norm_backward(float* dx, bf16* dx_half, float* dw, const float* x, const float* w,
                     const float* rstd, int N) {
    OpTimes::Scope timed(c_.times, "blocks.norm_backward", c_.stream);
    const int H = s_.hidden;
    train::rmsnorm_backward_kernel<kRowThreads><<<N, kRowThreads, 0, c_.stream>>>(
        dx, dx_half, dxn_, x, w, rstd, H);
    if (!dw) {  // a frozen norm weight
      check();
      return;
    }
    const int column_blocks = (H + 31) / 32;
    const int chunks = std::max(1, std::min(N / 64, 1024 / column_blocks));
    const int rows = (N + chunks - 1) / chunks;
    train::rmsnorm_weight_grad_kernel<<<dim3(column_blocks, (N + rows - 1) / rows), dim3(32, 8), 0,
                                        c_.stream>>>(dw, dxn_, x, rstd, N, H, rows);
    check();
  }
  void rotate(const Saved& a, const BlockTensors& w, int N, const BlockPass& pass) {
    OpTimes::Scope timed(c_.times, "blocks.norm_rope", c_.stream);
    const size_t rows = static_cast<size_t>(N) * (s_.heads + 2 * s_.kv_heads);
    const unsigned grid = stride_grid(rows, kThreads / 32, 8192);
    const train::QkvShape qs{s_.heads, s_.kv_heads, s_.head_dim, ld_, s_.eps};
    const float* qn = s_.qk_norm ? w.q_norm : nullptr;
    const float* kn = s_.qk_norm ? w.k_norm : nullptr;
    if (s_.head_dim == 64) {
      train::qk_norm_rope_kernel<64><<<grid, kThreads, 0, c_.stream>>>(
          a.rotated, a.rstd_q, a.rstd_k, a.qkv, qn, kn, pass.pos, pass.cos, pass.sin, N, qs);
    } else {
      train::qk_norm_rope_kernel<128><<<grid, kThreads, 0, c_.stream>>>(
          a.rotated, a.rstd_q, a.rstd_k, a.qkv, qn, kn, pass.pos, pass.cos, pass.sin, N, qs);
    }
    check();
  }
  void swiglu(const Saved& a, int N) {
    OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
    const size_t pieces = static_cast<size_t>(N) * s_.intermediate / 8;
    train::swiglu_forward_kernel<<<stride_grid(pieces, kThreads, 8192), kThreads, 0, c_.stream>>>(
        a.h, a.gu, N, s_.intermediate);
    check();
  }

  BlockEngineShape s_;
  TrainBlocksContext c_;
  int ld_ = 0, qd_ = 0, kvd_ = 0;
  void* arena_ = nullptr;
  size_t used_ = 0, tokens_ = 0;
  int seq_ = 0, layers_ = 0, head_rows_ = 0;
  size_t head_weight_bytes_ = 0;
  bf16* head_weights_ = nullptr;
  bf16 *xnf_ = nullptr, *logits_ = nullptr;
  float *rstdf_ = nullptr, *lse_head_ = nullptr;
  ActivationCheckpointing mode_ = ActivationCheckpointing::kNone;
  std::vector<Saved> saved_;
  bf16 *tmp_ = nullptr, *dres_half_ = nullptr, *dxn_ = nullptr, *dy_ = nullptr, *dqkv_ = nullptr,
       *dh_ = nullptr, *dgu_ = nullptr, *weights_ = nullptr;
  float* dsum_ = nullptr;
  bf16 *lora_du_ = nullptr, *lora_weights_ = nullptr;  // [tokens, rank]; the layer's adapters in bf16
  int u_index_[kAdapterTargets] = {};                   // a target's slice of Saved::lora_u, or -1
  SparseMlp sparse_;  // the sparse layers' router and experts
  std::unique_ptr<CudnnAttention> cudnn_;  // null: the flash kernels
  size_t cudnn_workspace_bytes_ = 0;
  char* cudnn_workspace_ = nullptr;
};

}  // namespace

bool train_blocks_support(const BlockEngineShape& s) {
  return flash_attention_supports(s.head_dim) && s.hidden % 8 == 0 && s.intermediate % 8 == 0 &&
         s.vocab > 0 && (s.moe.experts == 0 || (s.moe.intermediate % 8 == 0 && s.moe.top_k > 0)) &&
         s.heads % s.kv_heads == 0;
}

cudaError_t train_blocks_prepare() { return flash_attention_prepare<bf16, bf16>(); }

std::unique_ptr<BlockEngine> make_train_blocks(const BlockEngineShape& shape,
                                               TrainBlocksContext context) {
  if (!train_blocks_support(shape)) return nullptr;
  return std::make_unique<TrainBlocks>(shape, std::move(context));
}

}  // namespace cohort::models::cuda
