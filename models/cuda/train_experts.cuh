// A sparse layer's mixture of experts inside the fused training blocks
// (models/block_engine.h, BlockMoeShape): the op-by-op path's computation
// (models/model_moe.cc, the reference) on bf16 activations.
//
//   forward   logits [N, E] fp32 = xn · routerᵀ (bf16 operands); softmax and
//             top k, the stable sort by expert (the backend's routing ops,
//             ops/moe_routing.cuh, on the same stream); the sorted offsets
//             to the host (one copy of E + 1 integers per layer and pass,
//             as the reference); xs = xn's rows in sorted order; per expert
//             one GEMM against its adjacent gate|up rows, the SwiGLU, one
//             GEMM against its down rows; out [N, H] = each token's k rows
//             weighted. The experts' GEMMs of one kind are one grouped
//             cuBLAS call (the operands' pointers written on the device
//             from the offsets the host already has), or with
//             COHORT_MOE_GEMMS=loop one call each. Grouped, the 2.4B
//             preset's step took 170 ms against 570 on an H100
//             (bench/RESULTS.md): 64 experts' GEMMs of ~1,000 rows each
//             leave most of the GPU idle one at a time.
//   backward  dys = weight · dout into each sorted row, dweights = dout · ys;
//             per expert down's input and weight gradients, the SwiGLU's,
//             gate|up's; dxn = the k rows' input gradients summed, plus the
//             router's (dlogits from the routing's backward, the
//             load-balancing term included, then one GEMM each way). The
//             weight gradients (bf16 into the fp32 accumulators) of all
//             experts are one launch of ops/expert_grads.cuh's kernel.
//
// Saved per sparse layer: the routing (probs, choices, weights, sorted
// order) always; xs and h as the dense MLP's xn2 and h (recomputed under
// selective checkpointing), gu and ys as its gu. Each expert's GEMMs run
// over its own rows only: dropless, nothing padded.
//
// Included by models/cuda/train_blocks.cu only (its kernels are defined here).
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/env_knobs.h"
#include "models/backend.h"
#include "models/cuda/cublas_api.h"
#include "models/cuda/op_times.h"
#include "models/ops/expert_grads.cuh"
#include "models/ops/train_bf16.cuh"

namespace cohort::models::cuda {

namespace train {

// xs [rows, H] = x [source_rows[r]] (H a multiple of 8).
__global__ void gather_rows_bf16_kernel(bf16* xs, const bf16* x, const int32_t* source_rows, int rows, int H) {
  const size_t per_row = H / 8, pieces = static_cast<size_t>(rows) * per_row;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pieces;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = p / per_row, j = (p % per_row) * 8;
    *reinterpret_cast<uint4*>(xs + r * H + j) =
        *reinterpret_cast<const uint4*>(x + static_cast<size_t>(source_rows[r]) * H + j);
  }
}

// out [n, H] = sum over j < k of weights[t k + j] · ys[slots[t k + j]]
// (weights null: 1), summed in fp32 in choice order, rounded once.
__global__ void combine_rows_bf16_kernel(bf16* out, const bf16* ys, const int32_t* slots, const float* weights,
                                         int n, int k, int H) {
  const size_t per_row = H / 8, pieces = static_cast<size_t>(n) * per_row;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pieces;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = p / per_row, j = (p % per_row) * 8;
    float sum[8] = {}, v[8];
    for (int c = 0; c < k; ++c) {
      const size_t pair = t * k + c;
      const float w = weights ? weights[pair] : 1.0f;
      unpack8_bf16(*reinterpret_cast<const uint4*>(ys + static_cast<size_t>(slots[pair]) * H + j), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[e] = fmaf(w, v[e], sum[e]);
    }
    *reinterpret_cast<uint4*>(out + t * H + j) = pack8_bf16(sum);
  }
}

// For every pair, a warp: dys [slots[pair]] = weights[pair] · dout [pair / k]
// and dweights[pair] = dout [pair / k] · ys [slots[pair]], one read of the
// token's dout row for both (k reads of each row in all, not 2k).
__global__ void spread_and_weight_grad_bf16_kernel(bf16* dys, float* dweights, const bf16* dout, const bf16* ys,
                                                   const float* weights, const int32_t* slots, int pairs, int k,
                                                   int H) {
  const int lane = threadIdx.x & 31;
  const size_t pair = static_cast<size_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (pair >= static_cast<size_t>(pairs)) return;
  const size_t slot = static_cast<size_t>(slots[pair]);
  const bf16* d = dout + (pair / k) * H;
  const bf16* y = ys + slot * H;
  bf16* dy = dys + slot * H;
  const float w = weights[pair];
  float dot = 0, a[8], b[8];
  for (int j = lane * 8; j < H; j += 32 * 8) {
    unpack8_bf16(*reinterpret_cast<const uint4*>(d + j), a);
    unpack8_bf16(*reinterpret_cast<const uint4*>(y + j), b);
#pragma unroll
    for (int e = 0; e < 8; ++e) dot = fmaf(a[e], b[e], dot), a[e] *= w;
    *reinterpret_cast<uint4*>(dy + j) = pack8_bf16(a);
  }
  dot = warp_sum(dot);
  if (lane == 0) dweights[pair] = dot;
}

// fp32 -> bf16, any count and alignment (an adapter group's tensors sit at
// any offset).
__global__ void round_to_bf16_kernel(bf16* out, const float* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(x[i]);
  }
}

// Column-major C = alpha op(A) op(B) + beta C over bf16 operands with fp32
// accumulation: the blocks' GEMMs (row-major operands passed swapped).
inline void gemm_bf16(cublasHandle_t blas, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const bf16* a, int lda, const bf16* b, int ldb, void* c, cudaDataType_t c_type, int ldc,
                      float beta, float alpha = 1.0f) {
  COHORT_CUBLAS_CHECK_FATAL(cuda::blas::loaded().gemm_ex(blas, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                                         &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Where an operand of expert e's GEMM starts: base + e · per_expert +
// first · per_row bytes, `first` the expert's first sorted row (weights and
// their gradients move by expert, the sorted rows' tensors by row).
struct ExpertOperand {
  const void* base = nullptr;
  size_t per_expert = 0, per_row = 0;
  __host__ __device__ const void* at(int e, int first) const {
    return static_cast<const char*>(base) + size_t(e) * per_expert + size_t(first) * per_row;
  }
};

constexpr int kGroupedExperts = 128;  // experts one grouped call lists (a kernel argument)
struct ExpertRows {
  int count = 0;
  int expert[kGroupedExperts];
  int first[kGroupedExperts];
};

// ptrs [3, count]: each listed expert's A, B and C, for the grouped GEMM.
__global__ void expert_operands_kernel(const void** ptrs, ExpertOperand a, ExpertOperand b, ExpertOperand c,
                                       ExpertRows rows) {
  for (int j = threadIdx.x; j < rows.count; j += blockDim.x) {
    ptrs[j] = a.at(rows.expert[j], rows.first[j]);
    ptrs[rows.count + j] = b.at(rows.expert[j], rows.first[j]);
    ptrs[2 * rows.count + j] = c.at(rows.expert[j], rows.first[j]);
  }
}

}  // namespace train

// One sparse layer's tensors (N tokens, k choices, P = N k sorted rows).
struct SparseSaved {
  float* probs = nullptr;          // [N, E] logits, then their softmax in place
  int32_t* choices = nullptr;      // [P] chosen experts
  float* weights = nullptr;        // [P]
  int32_t* offsets = nullptr;      // [E + 1]
  int32_t* source_rows = nullptr;  // [P]
  int32_t* slots = nullptr;        // [P]
  float* prob_sums = nullptr;      // [E]; null without the load-balancing loss
  train::bf16 *xs = nullptr, *gu = nullptr, *h = nullptr, *ys = nullptr;  // [P, H], [P, 2Ie], [P, Ie], [P, H]
  std::vector<int32_t> host_offsets;  // offsets, copied back at forward
};

// Backward's scratch, one set for every layer.
struct SparseScratch {
  train::bf16 *dys = nullptr, *dh = nullptr, *dgu = nullptr, *dxs = nullptr, *dlogits_half = nullptr;
  float *dweights = nullptr, *dlogits = nullptr;
};

struct SparseContext {
  Backend* backend = nullptr;  // the routing ops (on `stream`) and copies
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  OpTimes* times = nullptr;
  int hidden = 0;
  BlockMoeShape shape;
};

class SparseMlp {
 public:
  using bf16 = train::bf16;
  explicit SparseMlp(SparseContext c) : c_(std::move(c)) {
    const char* gemms = read_env_knob(EnvKnob::kMoeGemms);
    COHORT_CHECK_MSG(!gemms || std::strcmp(gemms, "grouped") == 0 || std::strcmp(gemms, "loop") == 0,
                     "{}={} (grouped or loop)", env_knob_name(EnvKnob::kMoeGemms), gemms);
    grouped_ = !gemms || std::strcmp(gemms, "grouped") == 0;
  }

  // Carves what `layers` layers need at n tokens from the blocks' arena
  // (take(bytes), 256-byte aligned; null in the blocks' counting pass): per
  // sparse layer its routing, prob sums and host offsets, its experts'
  // tensors kept as the dense MLP's are (full: one slot for all, lean: xs
  // and h shared); one backward scratch set and one bf16 copy of a layer's
  // experts.
  template <typename Take>
  void plan(Take take, size_t n, int layers, bool full, bool lean) {
    const BlockMoeShape& m = c_.shape;
    const size_t E = m.experts, P = n * m.top_k, Ie = m.intermediate, H = c_.hidden;
    saved_.resize(layers);
    auto per_layer = [&](auto member, size_t count, bool kept) {
      using Ptr = std::remove_reference_t<decltype(saved_[0].*member)>;
      using T = std::remove_pointer_t<Ptr>;
      Ptr shared = nullptr;
      bool taken = false;  // (the counting pass's slices are all null)
      for (int l = 0; l < layers; ++l) {
        if (!m.sparse_layer(l)) continue;
        if (kept || !taken) shared = reinterpret_cast<Ptr>(take(count * sizeof(T))), taken = true;
        saved_[l].*member = shared;
      }
    };
    per_layer(&SparseSaved::probs, n * E, !full), per_layer(&SparseSaved::choices, P, !full);
    per_layer(&SparseSaved::weights, P, !full), per_layer(&SparseSaved::offsets, E + 1, !full);
    per_layer(&SparseSaved::source_rows, P, !full), per_layer(&SparseSaved::slots, P, !full);
    if (m.aux_loss) per_layer(&SparseSaved::prob_sums, E, true);
    per_layer(&SparseSaved::xs, P * H, !lean), per_layer(&SparseSaved::gu, P * 2 * Ie, !full);
    per_layer(&SparseSaved::h, P * Ie, !lean), per_layer(&SparseSaved::ys, P * H, !full);
    auto half = [&](size_t count) { return reinterpret_cast<bf16*>(take(count * sizeof(bf16))); };
    auto single = [&](size_t count) { return reinterpret_cast<float*>(take(count * sizeof(float))); };
    scratch_.dys = half(P * H), scratch_.dh = half(P * Ie), scratch_.dgu = half(P * 2 * Ie);
    scratch_.dxs = half(P * H), scratch_.dlogits_half = half(n * E);
    scratch_.dweights = single(P), scratch_.dlogits = single(n * E);
    experts_weights_ = half(experts_numel());
    grouped_operands_ = reinterpret_cast<const void**>(take(3 * train::kGroupedExperts * sizeof(void*)));
  }
  size_t experts_numel() const { return size_t(c_.shape.experts) * 3 * c_.shape.intermediate * c_.hidden; }
  bf16* experts_scratch() const { return experts_weights_; }
  BlockMoeStats stats(int l) const {
    if (!c_.shape.sparse_layer(l) || l >= static_cast<int>(saved_.size())) return {};
    return {&saved_[l].host_offsets, saved_[l].prob_sums};
  }

  // out [N, H] = layer l's experts on xn [N, H]. router [E, H] and experts
  // (E blocks of gate [Ie, H], up [Ie, H], down [H, Ie]) in bf16.
  void forward(int l, const bf16* router, const bf16* experts, const bf16* xn, bf16* out, int N) {
    SparseSaved& s = saved_[l];
    const int H = c_.hidden, E = c_.shape.experts, k = c_.shape.top_k, Ie = c_.shape.intermediate, P = N * k;
    {
      OpTimes::Scope timed(c_.times, "blocks.moe_route", c_.stream);
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, E, N, H, router, H, xn, H, s.probs, CUDA_R_32F, E, 0.0f);
      c_.backend->moe_router_forward(s.probs, s.choices, s.weights, s.prob_sums, s.probs, N, E, k,
                                     c_.shape.normalize_top_k);
      c_.backend->moe_permute(s.offsets, s.source_rows, s.slots, s.choices, N, E, k);
      s.host_offsets.resize(E + 1);
      c_.backend->copy_to_host(s.host_offsets.data(), s.offsets, (E + 1) * sizeof(int32_t));
    }
    gather(s, xn, P);
    // gu = xs · gate|upᵀ, ys = h · downᵀ, each expert over its rows.
    expert_gemms(s, CUBLAS_OP_T, CUBLAS_OP_N, [&](int rows) { return Dims{2 * Ie, rows, H}; },
                 weights(experts, 0), H, sorted(s.xs, H), H, sorted(s.gu, 2 * Ie), CUDA_R_16BF, 2 * Ie, 0.0f);
    swiglu(s, P);
    expert_gemms(s, CUBLAS_OP_T, CUBLAS_OP_N, [&](int rows) { return Dims{H, rows, Ie}; },
                 weights(experts, down_offset()), Ie, sorted(s.h, Ie), Ie, sorted(s.ys, H), CUDA_R_16BF, H, 0.0f);
    OpTimes::Scope timed(c_.times, "blocks.moe_combine", c_.stream);
    train::combine_rows_bf16_kernel<<<grid(size_t(N) * H / 8), kThreads, 0, c_.stream>>>(out, s.ys, s.slots,
                                                                                          s.weights, N, k, H);
    check();
  }

  // Selective checkpointing: xs and h again, from xn and the kept gu.
  void recompute(int l, const bf16* xn, int N) {
    SparseSaved& s = saved_[l];
    const int P = N * c_.shape.top_k;
    gather(s, xn, P);
    swiglu(s, P);
  }

  // dxn [N, H] = d loss / d xn (overwritten) from dout [N, H], the MLP
  // branch's output gradient; the router's and experts' gradients
  // accumulate into d_router / d_experts (null: a frozen base). aux_grad:
  // the load-balancing loss's d/dprob per expert (null: none).
  void backward(int l, const bf16* router, const bf16* experts, float* d_router, float* d_experts, const bf16* dout,
                const bf16* xn, bf16* dxn, int N, const float* aux_grad) {
    SparseSaved& s = saved_[l];
    const SparseScratch& x = scratch_;
    const int H = c_.hidden, E = c_.shape.experts, k = c_.shape.top_k, Ie = c_.shape.intermediate, P = N * k;
    {
      OpTimes::Scope timed(c_.times, "blocks.moe_combine", c_.stream);
      train::spread_and_weight_grad_bf16_kernel<<<(P + kThreads / 32 - 1) / (kThreads / 32), kThreads, 0,
                                                  c_.stream>>>(x.dys, x.dweights, dout, s.ys, s.weights, s.slots, P,
                                                               k, H);
      check();
    }
    // down: dh = dys · down; d_down += dysᵀ h.
    expert_gemms(s, CUBLAS_OP_N, CUBLAS_OP_N, [&](int rows) { return Dims{Ie, rows, H}; },
                 weights(experts, down_offset()), Ie, sorted(x.dys, H), H, sorted(x.dh, Ie), CUDA_R_16BF, Ie, 0.0f);
    if (d_experts) {
      weight_grads(s, x.dys, H, s.h, Ie, d_experts + down_offset(), [&] {
        expert_gemms(s, CUBLAS_OP_N, CUBLAS_OP_T, [&](int rows) { return Dims{Ie, H, rows}; }, sorted(s.h, Ie), Ie,
                     sorted(x.dys, H), H, gradients(d_experts, down_offset()), CUDA_R_32F, Ie, 1.0f);
      });
    }
    {
      OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
      train::swiglu_backward_kernel<<<grid(size_t(P) * Ie / 8), kThreads, 0, c_.stream>>>(x.dgu, x.dh, s.gu, P, Ie);
      check();
    }
    // gate|up: dxs = dgu · gate_up; d_gate_up += dguᵀ xs.
    expert_gemms(s, CUBLAS_OP_N, CUBLAS_OP_N, [&](int rows) { return Dims{H, rows, 2 * Ie}; }, weights(experts, 0),
                 H, sorted(x.dgu, 2 * Ie), 2 * Ie, sorted(x.dxs, H), CUDA_R_16BF, H, 0.0f);
    if (d_experts) {
      weight_grads(s, x.dgu, 2 * Ie, s.xs, H, d_experts, [&] {
        expert_gemms(s, CUBLAS_OP_N, CUBLAS_OP_T, [&](int rows) { return Dims{H, 2 * Ie, rows}; }, sorted(s.xs, H),
                     H, sorted(x.dgu, 2 * Ie), 2 * Ie, gradients(d_experts, 0), CUDA_R_32F, H, 1.0f);
      });
    }
    {
      OpTimes::Scope timed(c_.times, "blocks.moe_combine", c_.stream);
      train::combine_rows_bf16_kernel<<<grid(size_t(N) * H / 8), kThreads, 0, c_.stream>>>(dxn, x.dxs, s.slots,
                                                                                            nullptr, N, k, H);
      check();
    }
    // The router: dlogits from the weights' gradients (and the balancing
    // term), then dxn += dlogits · router, d_router += dlogitsᵀ xn.
    OpTimes::Scope timed(c_.times, "blocks.moe_route", c_.stream);
    COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(x.dlogits, 0, size_t(N) * E * sizeof(float), c_.stream));
    c_.backend->moe_router_backward(x.dlogits, x.dweights, s.probs, s.choices, aux_grad, N, E, k,
                                    c_.shape.normalize_top_k);
    const size_t logits = size_t(N) * E;
    train::round_to_bf16_kernel<<<grid(logits), kThreads, 0, c_.stream>>>(x.dlogits_half, x.dlogits, logits);
    check();
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, H, N, E, router, H, x.dlogits_half, E, dxn, CUDA_R_16BF, H, 1.0f);
    if (d_router) gemm(CUBLAS_OP_N, CUBLAS_OP_T, H, E, N, xn, H, x.dlogits_half, E, d_router, CUDA_R_32F, H, 1.0f);
  }

 private:
  static void check() { COHORT_CUDA_CHECK_FATAL(cudaGetLastError()); }
  static unsigned grid(size_t work) {
    return static_cast<unsigned>(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, 8192));
  }
  // An expert's block holds gate [Ie, H], up [Ie, H], down [H, Ie].
  size_t per_expert_numel() const { return size_t(3) * c_.shape.intermediate * c_.hidden; }
  size_t down_offset() const { return size_t(2) * c_.shape.intermediate * c_.hidden; }
  train::ExpertOperand weights(const bf16* experts, size_t offset) const {
    return {experts + offset, per_expert_numel() * sizeof(bf16), 0};
  }
  train::ExpertOperand gradients(const float* d_experts, size_t offset) const {
    return {d_experts + offset, per_expert_numel() * sizeof(float), 0};
  }
  // A tensor of the sorted rows, `width` bf16 a row.
  static train::ExpertOperand sorted(const bf16* rows, int width) { return {rows, 0, size_t(width) * sizeof(bf16)}; }

  struct Dims {
    int m, n, k;
  };
  // For each expert with rows, in order: C = op(A) op(B) (+ beta C), column
  // major as cuBLAS has it, dims(rows) its sizes. One grouped call, or
  // one call each (COHORT_MOE_GEMMS=loop).
  template <typename DimsOf>
  void expert_gemms(const SparseSaved& s, cublasOperation_t ta, cublasOperation_t tb, DimsOf dims,
                    train::ExpertOperand a, int lda, train::ExpertOperand b, int ldb, train::ExpertOperand c,
                    cudaDataType_t c_type, int ldc, float beta) {
    // Each kind of the experts' GEMMs timed apart: the weight gradients
    // (into fp32), the forward (op(A) = Aᵀ: the weights as stored), the
    // input gradients.
    const char* kind = c_type == CUDA_R_32F   ? "blocks.moe_experts.weight_grad"
                       : ta == CUBLAS_OP_T ? "blocks.moe_experts.forward"
                                           : "blocks.moe_experts.input_grad";
    OpTimes::Scope timed(c_.times, kind, c_.stream);
    const int E = c_.shape.experts;
    // cuBLAS groups only GEMMs whose output is the inputs' type (13.1 on an
    // H100 answers CUBLAS_STATUS_NOT_SUPPORTED for bf16 into fp32): the
    // weight gradients, accumulated in fp32, come here one call per expert
    // only under COHORT_MOE_GEMMS=loop (else weight_grads' own kernel).
    if (!grouped_ || E > train::kGroupedExperts || c_type != CUDA_R_16BF) {
      for (int e = 0; e < E; ++e) {
        const int first = s.host_offsets[e], rows = s.host_offsets[e + 1] - first;
        if (rows == 0) continue;
        const Dims d = dims(rows);
        gemm(ta, tb, d.m, d.n, d.k, static_cast<const bf16*>(a.at(e, first)), lda,
             static_cast<const bf16*>(b.at(e, first)), ldb, const_cast<void*>(c.at(e, first)), c_type, ldc, beta);
      }
      return;
    }
    train::ExpertRows list;
    grouped_args_.clear();
    for (int e = 0; e < E; ++e) {
      const int first = s.host_offsets[e], rows = s.host_offsets[e + 1] - first;
      if (rows == 0) continue;
      list.expert[list.count] = e, list.first[list.count] = first, ++list.count;
      const Dims d = dims(rows);
      grouped_args_.add(ta, tb, d.m, d.n, d.k, lda, ldb, ldc, beta);
    }
    if (list.count == 0) return;
    train::expert_operands_kernel<<<1, 128, 0, c_.stream>>>(grouped_operands_, a, b, c, list);
    check();
    const void* const* ptrs = grouped_operands_;
    COHORT_CUBLAS_CHECK_FATAL(cuda::blas::loaded().gemm_grouped_batched_ex(
        c_.blas, grouped_args_.ta.data(), grouped_args_.tb.data(), grouped_args_.m.data(), grouped_args_.n.data(),
        grouped_args_.k.data(), grouped_args_.alpha.data(), ptrs, CUDA_R_16BF, grouped_args_.lda.data(),
        ptrs + list.count, CUDA_R_16BF, grouped_args_.ldb.data(), grouped_args_.beta.data(),
        const_cast<void* const*>(ptrs + 2 * list.count), c_type, grouped_args_.ldc.data(), list.count,
        grouped_args_.size.data(), CUBLAS_COMPUTE_32F));
  }
  // dw_e [O, I] += g_eᵀ x_e for every expert (ops/expert_grads.h: one
  // launch, the 2.4B preset's 64 experts' tiles side by side); with
  // COHORT_MOE_GEMMS=loop, `per_expert` (one cuBLAS call an expert).
  template <typename PerExpert>
  void weight_grads(const SparseSaved& s, const bf16* g, int O, const bf16* x, int I, float* dw,
                    PerExpert per_expert) {
    if (!grouped_ || !expert_weight_grads_supported(O, I)) return per_expert();
    OpTimes::Scope timed(c_.times, "blocks.moe_experts.weight_grad", c_.stream);
    expert_weight_grads_bf16(dw, per_expert_numel(), reinterpret_cast<const Bf16Bits*>(g),
                             reinterpret_cast<const Bf16Bits*>(x), s.offsets, c_.shape.experts, O, I, c_.stream);
  }
  void gather(SparseSaved& s, const bf16* xn, int P) {
    OpTimes::Scope timed(c_.times, "blocks.moe_combine", c_.stream);
    train::gather_rows_bf16_kernel<<<grid(size_t(P) * c_.hidden / 8), kThreads, 0, c_.stream>>>(
        s.xs, xn, s.source_rows, P, c_.hidden);
    check();
  }
  void swiglu(SparseSaved& s, int P) {
    OpTimes::Scope timed(c_.times, "blocks.elementwise", c_.stream);
    train::swiglu_forward_kernel<<<grid(size_t(P) * c_.shape.intermediate / 8), kThreads, 0, c_.stream>>>(
        s.h, s.gu, P, c_.shape.intermediate);
    check();
  }
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16* a, int lda, const bf16* b,
            int ldb, void* c, cudaDataType_t c_type, int ldc, float beta) {
    train::gemm_bf16(c_.blas, ta, tb, m, n, k, a, lda, b, ldb, c, c_type, ldc, beta);
  }

  // A grouped call's host arrays, one entry a group (an expert with rows).
  struct GroupedArgs {
    std::vector<cublasOperation_t> ta, tb;
    std::vector<int> m, n, k, lda, ldb, ldc, size;
    std::vector<float> alpha, beta;
    void clear() {
      for (auto* v : {&m, &n, &k, &lda, &ldb, &ldc, &size}) v->clear();
      ta.clear(), tb.clear(), alpha.clear(), beta.clear();
    }
    void add(cublasOperation_t a_op, cublasOperation_t b_op, int m_, int n_, int k_, int lda_, int ldb_, int ldc_,
             float beta_) {
      ta.push_back(a_op), tb.push_back(b_op), m.push_back(m_), n.push_back(n_), k.push_back(k_);
      lda.push_back(lda_), ldb.push_back(ldb_), ldc.push_back(ldc_), size.push_back(1);
      alpha.push_back(1.0f), beta.push_back(beta_);
    }
  };

  SparseContext c_;
  bool grouped_ = true;                      // COHORT_MOE_GEMMS=loop: false
  GroupedArgs grouped_args_;
  const void** grouped_operands_ = nullptr;  // [3, kGroupedExperts] device pointers
  std::vector<SparseSaved> saved_;  // per layer (a dense layer's stays empty)
  SparseScratch scratch_;
  bf16* experts_weights_ = nullptr;  // a layer's experts rounded to bf16
};

}  // namespace cohort::models::cuda
