// Backend: where the model's memory lives and how its ops run. The decoder in
// model.h is written once against this interface; CpuBackend (fp32, OpenBLAS)
// is the reference, CudaBackend (models/cuda/) runs the same calls on a GPU.
//
// Every pointer passed to an op is in the backend's memory (host memory for
// CPU, device memory for CUDA). Ops follow the contracts stated in the
// models/ops/*.h headers: input gradients and parameter gradients are
// accumulated (+=), outputs overwritten. Memory from alloc() stays valid until
// free() or the backend's destruction; allocation happens at warm-up only
// (the CUDA backend draws from a pool, never cudaMalloc in the step loop).
// A backend is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "models/block_engine.h"
#include "models/ops/adamw.h"
#include "models/ops/attention.h"
#include "models/ops/dropout.h"
#include "models/quant/row_packed.h"
#include "models/tensor.h"
#include "models/tensor_parallel.h"
#include "models/working_weights.h"

namespace cohort::models {

// How GEMM operands are rounded before the multiply (products always
// accumulate in fp32). kFp32 multiplies exactly; kBf16 and kFp16 round
// every operand to that type, as tensor cores do — kFp16 also overflows to
// infinity beyond 65504, which is what loss scaling guards against.
enum class MatmulPrecision { kFp32, kBf16, kFp16 };
const char* matmul_precision_name(MatmulPrecision precision);
// The type GEMM operands are rounded to: kF32, kBF16 or kF16.
DType matmul_operand_dtype(MatmulPrecision precision);

// A range of floats in backend memory.
struct FloatRange {
  const float* data = nullptr;
  size_t n = 0;
};

// One copy of a CopyPlan: n elements from src + src_offset to dst + dst_offset.
struct CopyRange {
  size_t dst_offset = 0;
  size_t src_offset = 0;
  size_t n = 0;
};

// A fixed list of copies between two buffers, prepared once and then run as
// one operation (on CUDA: a table in device memory and a single kernel, where
// one cudaMemcpy per range would be thousands of launches per step).
class CopyPlan {
 public:
  virtual ~CopyPlan() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Memory. alloc() returns zeroed memory.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // same device
  virtual void copy_from_host(void* dst, const void* host, size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;  // synchronises
  float* alloc_floats(size_t n) { return static_cast<float*>(alloc(n * sizeof(float))); }
  // Conversions between f32 and a half type (kBF16 or kF16), round to
  // nearest even, as models/tensor.h's scalar conversions.
  virtual void cast_to_half(void* dst, DType half, const float* src, size_t n) = 0;
  virtual void cast_from_half(float* dst, const void* src, DType half, size_t n) = 0;

  // dst (f32, [w.rows, w.cols]) = a quantized weight in the row layout
  // (models/quant/row_packed.h, its buffers in this backend's memory),
  // exactly as quant::dequantize defines it: a frozen quantized base
  // (QLoRA) expands a block this way before the block runs.
  virtual void dequantize_rows(float* dst, const quant::RowPackedView& w) = 0;

  // Copy plans: dst (f32) ← src (f32, bf16 or f16, converted on the way).
  virtual std::unique_ptr<CopyPlan> make_copy_plan(const std::vector<CopyRange>& ranges) = 0;
  virtual void run_copy_plan(const CopyPlan& plan, float* dst, const void* src, DType src_dtype) = 0;

  // Working weights (models/working_weights.h): `working` holds n values of
  // `half` (kBF16 or kF16) mirroring master[0, n); registered, the linear
  // layers read it as their weight operand while the matmul precision is
  // that type, and adamw_update keeps the part it updates current. Whoever
  // else writes the masters calls refresh_working_weights for what changed.
  // The registry is shared by every backend; only the cast is theirs.
  void set_working_weights(const float* master, void* working, size_t n, DType half) {
    working_.add(master, working, n, half);
    refresh_working_weights(master, n);
  }
  // The same for a copy that already holds the values (a frozen base held
  // in bf16, models/quantized_base.h): nothing is cast, and the masters
  // need not hold them at all while it is registered.
  void attach_working_weights(const float* master, const void* working, size_t n, DType half) {
    working_.add(master, const_cast<void*>(working), n, half);
  }
  void clear_working_weights(const float* master) { working_.remove(master); }
  void refresh_working_weights(const float* master, size_t n) {
    const auto hit = working_.find(master, n);
    if (hit.working) cast_to_half(hit.working, hit.dtype, master, n);
  }

  // GEMM numerics for linear layers and attention (CPU: linear layers only;
  // its attention stays fp32). Default: the CPU backend kFp32, CUDA kBf16.
  virtual void set_matmul_precision(MatmulPrecision precision) = 0;
  virtual MatmulPrecision matmul_precision() const = 0;
  // Which training attention runs ([model] attention). The CPU backend is
  // the reference and always runs the math path; CUDA runs the fused kernels
  // for kAuto and kFlash where attention_supports_flash() holds.
  void set_attention_backend(AttentionBackend backend) { attention_backend_ = backend; }
  AttentionBackend attention_backend() const { return attention_backend_; }
  // True when attention_forward/backward at this head size run the fused
  // kernels under the current settings.
  virtual bool attention_runs_fused(int head_dim) const { (void)head_dim; return false; }
  // Whether this backend can run `backend` at all (cuDNN: the library
  // loads), with the reason when not.
  virtual Status attention_available(AttentionBackend backend) const {
    if (backend == AttentionBackend::kCudnn) return unavailable("cuDNN attention runs on CUDA devices only");
    return Status::ok();
  }
  // Fused training blocks (block_engine.h) for this shape under the current
  // settings, or null where the backend has none (the CPU reference never).
  virtual std::unique_ptr<BlockEngine> make_block_engine(const BlockEngineShape& shape) {
    (void)shape;
    return nullptr;
  }

  // Ops (see the matching models/ops/*.h for layouts and numerics; attention
  // scratch is attention_scratch_floats(T, heads) floats, or B * T * heads
  // where attention_runs_fused). A null weight gradient (dw of the linear
  // and norm backwards) is a frozen weight: only the input gradient is
  // computed (LoRA's base).
  virtual void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                                 int vocab_begin, int rows) = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n,
                                  int dim, int vocab_begin, int rows) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n,
                               int dim, float eps) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                const float* w, const float* rstd, int n, int dim) = 0;
  virtual void linear_forward(float* y, const float* x, const float* w, const float* b, int n,
                              int in, int out) = 0;
  virtual void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, int n, int in, int out) = 0;
  virtual void rope_forward(float* x, const int32_t* pos, int n, int heads, int head_dim,
                            const float* cos, const float* sin) = 0;
  virtual void rope_backward(float* dx, const int32_t* pos, int n, int heads, int head_dim,
                             const float* cos, const float* sin) = 0;
  virtual void attention_forward(float* y, float* lse, float* scratch, const float* q,
                                 const float* k, const float* v, int B, int T, int heads,
                                 int kv_heads, int head_dim) = 0;
  // y is attention_forward's output (the fused kernels' softmax-backward
  // term is rowsum(dy * y)).
  virtual void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy,
                                  const float* y, const float* q, const float* k, const float* v,
                                  const float* lse, int B, int T, int heads, int kv_heads,
                                  int head_dim) = 0;
  virtual void kv_cache_write(float* cache, const float* src, int m, int first_pos, int capacity,
                              int kv_heads, int head_dim) = 0;
  virtual void attention_cached(float* y, float* scratch, const float* q, const float* kcache,
                                const float* vcache, int m, int first_pos, int capacity, int heads,
                                int kv_heads, int head_dim) = 0;
  virtual void swiglu_forward(float* h, const float* g, const float* u, size_t n) = 0;
  virtual void swiglu_backward(float* dg, float* du, const float* dh, const float* g,
                               const float* u, size_t n) = 0;
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;
  // Mixture-of-experts routing (ops/moe_routing.h; gather_rows: dst [m, dim]
  // = src rows rows[0..m), ops/embedding.h); the experts' GEMMs are
  // linear_forward/backward over each expert's rows.
  virtual void moe_router_forward(float* probs, int32_t* experts, float* weights, float* prob_sums,
                                  const float* logits, int n, int num_experts, int k,
                                  bool renormalize) = 0;
  virtual void moe_router_backward(float* dlogits, const float* dweights, const float* probs,
                                   const int32_t* experts, const float* dprob_all, int n,
                                   int num_experts, int k, bool renormalize) = 0;
  virtual void moe_permute(int32_t* offsets, int32_t* source_rows, int32_t* slots,
                           const int32_t* experts, int n, int num_experts, int k) = 0;
  virtual void gather_rows(float* dst, const float* src, const int32_t* rows, int m, int dim) = 0;
  virtual void moe_combine(float* out, const float* ys, const int32_t* slots, const float* weights,
                           int n, int k, int dim) = 0;
  virtual void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys,
                                    const float* weights, const int32_t* slots, int n, int k,
                                    int dim) = 0;
  virtual void accumulate(float* dst, const float* src, size_t n) = 0;  // dst += src
  // LoRA's dropout on the adapters' input (ops/dropout.h): a mask drawn from
  // a counter-based hash, never stored.
  virtual void dropout_forward(float* out, const float* x, int rows, int cols,
                               const DropoutMask& mask) = 0;
  virtual void dropout_backward(float* dx, const float* dout, int rows, int cols,
                                const DropoutMask& mask) = 0;
  virtual void cross_entropy_forward_backward(float* losses, float* logits, float* scratch,
                                              const int32_t* targets, int n, int vocab_local,
                                              int vocab_begin, float grad_scale,
                                              const TensorParallelComm* tp) = 0;
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                            const AdamWConfig& config, int64_t step, bool decay) = 0;
  virtual double sum_of_squares(const float* x, size_t n) = 0;
  // The total over many ranges with one host round trip (the global norm
  // over a sharded model's segments); non-finite values make it non-finite.
  virtual double sum_of_squares_ranges(const std::vector<FloatRange>& ranges) = 0;
  virtual void scale(float* x, size_t n, float factor) = 0;

 protected:
  const WorkingWeights& working_weights() const { return working_; }

 private:
  WorkingWeights working_;
  AttentionBackend attention_backend_ = AttentionBackend::kAuto;
};

// The fp32 CPU reference backend. Sets OpenBLAS to one thread (one rank per
// core) unless OPENBLAS_NUM_THREADS is set.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace cohort::models
