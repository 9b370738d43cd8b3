// CudaBackend: every Backend op as a CUDA kernel or cuBLAS call on one
// stream, memory from the caching pool. It includes each op family's .cuh
// (beside its CPU reference in models/ops/) so the GPU side compiles in two
// translation units, this and the fused training blocks' (train_blocks.cu):
// the decode kernels of the bf16 graph engine (models/decode/) (embed_bf16,
// add_rmsnorm_bf16, qkv_rope_cache, decode_attention, swiglu_bf16,
// row_argmax) are here too.
#include <atomic>
#include <cstdlib>
#include <vector>

#include "models/cuda/common.cuh"
#include "models/cuda/copy_plan.cuh"
#include "models/cuda/cudnn_attention.h"
#include "models/cuda/memory_pool.h"
#include "models/cuda/op_times.h"
#include "models/cuda/train_blocks.h"
#include "models/cuda_backend.h"
#include "models/ops/adamw.cuh"
#include "models/ops/argmax.cuh"
#include "models/ops/attention.cuh"
#include "models/ops/flash_attention.cuh"
#include "models/ops/gemv.cuh"
#include "models/ops/quant_gemv.cuh"
#include "models/ops/cross_entropy.cuh"
#include "models/ops/decode_attention.cuh"
#include "models/ops/embedding.cuh"
#include "models/ops/fp8_rows.cuh"
#include "models/ops/linear.cuh"
#include "models/ops/moe_routing.cuh"
#include "models/ops/moe_experts.cuh"
#include "models/ops/lora_rows.cuh"
#include "models/ops/lora_runs.cuh"
#include "models/ops/lora_dense.cuh"
#include "models/ops/prefill_attention.cuh"
#include "models/ops/rmsnorm.cuh"
#include "models/ops/rope.cuh"
#include "models/ops/skinny_gemm.cuh"
#include "models/ops/swiglu.cuh"
#include "models/ops/dropout.cuh"

namespace cohort::models {

namespace cuda {
namespace {
std::atomic<bool> serial_kernel_launches{false};
}  // namespace
bool serial_launches() { return serial_kernel_launches.load(std::memory_order_relaxed); }
}  // namespace cuda

void set_serial_kernel_launches(bool on) { cuda::serial_kernel_launches.store(on); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

constexpr unsigned kNormBlock = 256;
constexpr unsigned kSumBlocks = 1024;

// The table is allocated once, when a plan is made (at set-up, not per step).
struct CudaCopyPlan final : CopyPlan {
  cuda::DeviceCopyRange* table = nullptr;
  int count = 0;
  unsigned long long blocks = 0;
  ~CudaCopyPlan() override {
    if (table) cudaFree(table);  // waits for kernels still reading it
  }
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(int device, bool op_times) : device_(device), pool_(device), op_times_(op_times) {}
  // Set-up that can fail (no such device, out of memory): a Status for
  // make_cuda_backend rather than an abort.
  Status init() {
    COHORT_CUDA_CHECK(cudaSetDevice(device_));
    COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    COHORT_ASSIGN_OR_RETURN(const cuda::blas::Api* blas, cuda::blas::api());
    COHORT_CUBLAS_CHECK(blas->create(&blas_.handle));
    COHORT_CUBLAS_CHECK(blas->set_stream(blas_.handle, stream_));
    // The decode kernel keeps a sequence's scores in dynamic shared memory:
    // allow all the device offers beyond the kernel's static reduction slots.
    int optin = 0;
    COHORT_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    cudaFuncAttributes attrs;
    COHORT_CUDA_CHECK(cudaFuncGetAttributes(&attrs, cuda::attention_cached_kernel));
    max_shared_ = optin - static_cast<int>(attrs.sharedSizeBytes);
    COHORT_CUDA_CHECK(cudaFuncSetAttribute(
        cuda::attention_cached_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared_));
    COHORT_CUDA_CHECK((cuda::flash_attention_prepare<float, float>()));
    COHORT_CUDA_CHECK(cuda::train_blocks_prepare());
    ensure_partials(kSumBlocks);
    return Status::ok();
  }
  ~CudaBackendImpl() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (blas_.handle) cuda::blas::loaded().destroy(blas_.handle);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kCuda; }
  void* stream() const override { return stream_; }
  void synchronize() override { COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_)); }
  std::vector<std::pair<std::string, double>> op_times_ms() override { return op_times_.totals(stream_); }
  CudaBackendStats stats() const override {
    return {pool_.reserved_bytes(), pool_.in_use_bytes(), pool_.device_allocations()};
  }

  void* alloc(size_t bytes) override {
    void* p = pool_.allocate(bytes);
    COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void free(void* ptr) override {
    // Work queued on the stream may still use the block; wait before reuse.
    COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));
    pool_.release(ptr);
  }
  void zero(void* ptr, size_t bytes) override {
    COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(ptr, 0, bytes, stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));  // host buffer may be reused at once
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));
  }

  void cast_to_half(void* dst, DType half, const float* src, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "cast_to_half", stream_);
    COHORT_CHECK(half == DType::kBF16 || half == DType::kF16);
    if (half == DType::kBF16) {
      cuda::cast_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          static_cast<__nv_bfloat16*>(dst), src, n);
    } else {
      cuda::cast_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          static_cast<__half*>(dst), src, n);
    }
    check_launch();
  }
  void cast_from_half(float* dst, const void* src, DType half, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "cast_from_half", stream_);
    COHORT_CHECK(half == DType::kBF16 || half == DType::kF16);
    if (half == DType::kBF16) {
      cuda::cast_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          dst, static_cast<const __nv_bfloat16*>(src), n);
    } else {
      cuda::cast_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          dst, static_cast<const __half*>(src), n);
    }
    check_launch();
  }
  void dequantize_rows(float* dst, const quant::RowPackedView& w) override {
    cuda::OpTimes::Scope timed(&op_times_, "dequantize_rows", stream_);
    cuda::dequantize_rows_f32(dst, w, stream_);
    check_launch();
  }
  std::unique_ptr<CopyPlan> make_copy_plan(const std::vector<CopyRange>& ranges) override {
    auto plan = std::make_unique<CudaCopyPlan>();
    std::vector<cuda::DeviceCopyRange> table;
    for (const auto& r : ranges) {
      if (r.n == 0) continue;
      table.push_back({r.dst_offset, r.src_offset, r.n, plan->blocks});
      plan->blocks += (r.n + cuda::kCopyChunk - 1) / cuda::kCopyChunk;
    }
    plan->count = static_cast<int>(table.size());
    if (table.empty()) return plan;
    const size_t bytes = table.size() * sizeof(table[0]);
    COHORT_CUDA_CHECK_FATAL(cudaMalloc(&plan->table, bytes));
    COHORT_CUDA_CHECK_FATAL(cudaMemcpy(plan->table, table.data(), bytes, cudaMemcpyHostToDevice));
    return plan;
  }
  void run_copy_plan(const CopyPlan& generic, float* dst, const void* src, DType src_dtype) override {
    cuda::OpTimes::Scope timed(&op_times_, "run_copy_plan", stream_);
    const auto& plan = static_cast<const CudaCopyPlan&>(generic);
    if (plan.count == 0) return;
    const auto grid = static_cast<unsigned>(plan.blocks);
    switch (src_dtype) {
      case DType::kF32:
        cuda::copy_plan_kernel<<<grid, cuda::kThreads, 0, stream_>>>(dst, static_cast<const float*>(src),
                                                                      plan.table, plan.count);
        break;
      case DType::kBF16:
        cuda::copy_plan_kernel<<<grid, cuda::kThreads, 0, stream_>>>(
            dst, static_cast<const __nv_bfloat16*>(src), plan.table, plan.count);
        break;
      case DType::kF16:
        cuda::copy_plan_kernel<<<grid, cuda::kThreads, 0, stream_>>>(dst, static_cast<const __half*>(src),
                                                                      plan.table, plan.count);
        break;
      case DType::kI32:
      case DType::kI64:
      case DType::kU8:
        COHORT_CHECK_MSG(false, "copy plans read f32, bf16 or f16");
    }
    check_launch();
  }
  void set_matmul_precision(MatmulPrecision precision) override {
    precision_ = precision;
    half_.type = precision == MatmulPrecision::kFp16 ? CUDA_R_16F : CUDA_R_16BF;
    blas_.compute = precision == MatmulPrecision::kFp32   ? CUBLAS_COMPUTE_32F
                    : precision == MatmulPrecision::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                          : CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  MatmulPrecision matmul_precision() const override { return precision_; }

  void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                         int vocab_begin, int rows) override {
    cuda::OpTimes::Scope timed(&op_times_, "embedding_forward", stream_);
    cuda::embedding_forward_kernel<<<n, kNormBlock, 0, stream_>>>(out, ids, table, dim, vocab_begin,
                                                                  rows);
    check_launch();
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n, int dim,
                          int vocab_begin, int rows) override {
    cuda::OpTimes::Scope timed(&op_times_, "embedding_backward", stream_);
    cuda::embedding_backward_kernel<<<n, kNormBlock, 0, stream_>>>(dtable, dout, ids, dim,
                                                                   vocab_begin, rows);
    check_launch();
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n, int dim,
                       float eps) override {
    cuda::OpTimes::Scope timed(&op_times_, "rmsnorm_forward", stream_);
    cuda::rmsnorm_forward_kernel<<<n, norm_threads(dim), 0, stream_>>>(out, rstd, x, w, dim, eps);
    check_launch();
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int n, int dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "rmsnorm_backward", stream_);
    cuda::rmsnorm_backward_input_kernel<<<n, norm_threads(dim), 0, stream_>>>(dx, dout, x, w, rstd,
                                                                              dim);
    if (dw) {  // null: a frozen weight
      const int rows = cuda::weight_grad_rows_per_chunk(n, dim);
      const dim3 grid((dim + 31) / 32, (n + rows - 1) / rows);
      cuda::rmsnorm_backward_weight_kernel<<<grid, dim3(32, 8), 0, stream_>>>(dw, dout, x, rstd, n,
                                                                              dim, rows);
    }
    check_launch();
  }
  void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) override {
    cuda::OpTimes::Scope timed(&op_times_, "linear_forward", stream_);
    if (precision_ == MatmulPrecision::kFp32) {
      cuda::linear_forward(blas_, stream_, y, x, w, b, n, in, out);
    } else {
      const void* working = working_for(w, size_t(out) * in);
      ensure_half_operands(size_t(n) * in, working ? 0 : size_t(out) * in, 0);
      cuda::linear_forward_half(blas_, stream_, half_, y, x, w, working, b, n, in, out);
    }
    check_launch();
  }
  void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, int n, int in, int out) override {
    cuda::OpTimes::Scope timed(&op_times_, "linear_backward", stream_);
    if (precision_ == MatmulPrecision::kFp32) {
      cuda::linear_backward(blas_, stream_, dx, dw, db, dy, x, w, n, in, out);
    } else {
      const void* working = working_for(w, size_t(out) * in);
      ensure_half_operands(size_t(n) * in, working ? 0 : size_t(out) * in, size_t(n) * out);
      cuda::linear_backward_half(blas_, stream_, half_, dx, dw, db, dy, x, w, working, n, in, out);
    }
    check_launch();
  }
  void rope_forward(float* x, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                    const float* sin) override {
    cuda::OpTimes::Scope timed(&op_times_, "rope_forward", stream_);
    const size_t pairs = static_cast<size_t>(n) * heads * (head_dim / 2);
    cuda::rope_kernel<<<cuda::grid_for(pairs), cuda::kThreads, 0, stream_>>>(
        x, pos, n, heads, head_dim, cos, sin, 1.0f);
    check_launch();
  }
  void rope_backward(float* dx, const int32_t* pos, int n, int heads, int head_dim,
                     const float* cos, const float* sin) override {
    cuda::OpTimes::Scope timed(&op_times_, "rope_backward", stream_);
    const size_t pairs = static_cast<size_t>(n) * heads * (head_dim / 2);
    cuda::rope_kernel<<<cuda::grid_for(pairs), cuda::kThreads, 0, stream_>>>(
        dx, pos, n, heads, head_dim, cos, sin, -1.0f);
    check_launch();
  }
  void attention_forward(float* y, float* lse, float* scratch, const float* q, const float* k,
                         const float* v, int B, int T, int heads, int kv_heads,
                         int head_dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "attention_forward", stream_);
    if (attention_runs_fused(head_dim)) {
      const cuda::flash::Shape sh = cuda::flash::packed_shape(T, heads, kv_heads, head_dim);
      if (head_dim == 64) cuda::flash_forward_launch<64>(stream_, y, lse, q, k, v, B, sh);
      else cuda::flash_forward_launch<128>(stream_, y, lse, q, k, v, B, sh);
    } else {
      cuda::attention_forward(blas_, stream_, y, lse, scratch, q, k, v,
                              {B, T, heads, kv_heads, head_dim});
    }
    check_launch();
  }
  void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy,
                          const float* y, const float* q, const float* k, const float* v,
                          const float* lse, int B, int T, int heads, int kv_heads,
                          int head_dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "attention_backward", stream_);
    if (attention_runs_fused(head_dim)) {
      // scratch holds at least B * heads * T floats (attention_scratch_floats).
      const cuda::flash::Shape sh = cuda::flash::packed_shape(T, heads, kv_heads, head_dim);
      if (head_dim == 64) cuda::flash_backward_launch<64>(stream_, dq, dk, dv, scratch, dy, q, k, v, y, lse, B, sh);
      else cuda::flash_backward_launch<128>(stream_, dq, dk, dv, scratch, dy, q, k, v, y, lse, B, sh);
    } else {
      cuda::attention_backward(blas_, stream_, dq, dk, dv, scratch, dy, q, k, v, lse,
                               {B, T, heads, kv_heads, head_dim});
    }
    check_launch();
  }
  bool attention_runs_fused(int head_dim) const override {
    // The fused kernels round operands to bf16: they serve bf16 GEMM
    // numerics only; fp16 and fp32 keep the math path.
    return attention_backend() != AttentionBackend::kMath && precision_ == MatmulPrecision::kBf16 &&
           cuda::flash_attention_supports(head_dim);
  }
  Status attention_available(AttentionBackend backend) const override {
    return backend == AttentionBackend::kCudnn ? cuda::cudnn_attention_available() : Status::ok();
  }
  std::unique_ptr<BlockEngine> make_block_engine(const BlockEngineShape& shape) override {
    // The same numerics as the fused attention: bf16 operands only.
    if (!attention_runs_fused(shape.head_dim)) return nullptr;
    cuda::TrainBlocksContext context;
    context.backend = this;
    context.blas = blas_.handle;
    context.stream = stream_;
    context.working_bf16 = [this](const float* w, size_t n) { return working_for(w, n); };
    context.times = &op_times_;
    context.attention = attention_backend();
    return cuda::make_train_blocks(shape, std::move(context));
  }
  void kv_cache_write(float* cache, const float* src, int m, int first_pos, int capacity,
                      int kv_heads, int head_dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "kv_cache_write", stream_);
    const size_t n = static_cast<size_t>(m) * kv_heads * head_dim;
    cuda::kv_cache_write_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
        cache, src, m, first_pos, capacity, kv_heads, head_dim);
    check_launch();
  }
  void attention_cached(float* y, float* /*scratch*/, const float* q, const float* kcache,
                        const float* vcache, int m, int first_pos, int capacity, int heads,
                        int kv_heads, int head_dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "attention_cached", stream_);
    const size_t shared = static_cast<size_t>(first_pos + m) * sizeof(float);
    COHORT_CHECK_MSG(shared <= static_cast<size_t>(max_shared_),
                     "context of {} positions exceeds the decode kernel's shared memory",
                     first_pos + m);
    cuda::attention_cached_kernel<<<dim3(m, heads), 128, shared, stream_>>>(
        y, q, kcache, vcache, first_pos, capacity, heads, kv_heads, head_dim);
    check_launch();
  }
  void swiglu_forward(float* h, const float* g, const float* u, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "swiglu_forward", stream_);
    cuda::swiglu_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(h, g, u, n);
    check_launch();
  }
  void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                       size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "swiglu_backward", stream_);
    cuda::swiglu_backward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(dg, du, dh, g,
                                                                                    u, n);
    check_launch();
  }
  void moe_router_forward(float* probs, int32_t* experts, float* weights, float* prob_sums,
                          const float* logits, int n, int num_experts, int k,
                          bool renormalize) override {
    if (n == 0) return;  // (an empty grid is a launch error)
    cuda::OpTimes::Scope timed(&op_times_, "moe_router_forward", stream_);
    cuda::moe_router_forward_kernel<<<cuda::moe_warp_blocks(n), 32 * cuda::kMoeRowsPerBlock, 0, stream_>>>(
        probs, experts, weights, logits, n, num_experts, k, renormalize);
    if (prob_sums) {
      cuda::moe_prob_sums_kernel<<<(num_experts + cuda::kThreads - 1) / cuda::kThreads, cuda::kThreads, 0,
                                   stream_>>>(prob_sums, probs, n, num_experts);
    }
    check_launch();
  }
  void moe_router_backward(float* dlogits, const float* dweights, const float* probs,
                           const int32_t* experts, const float* dprob_all, int n, int num_experts,
                           int k, bool renormalize) override {
    if (n == 0) return;
    cuda::OpTimes::Scope timed(&op_times_, "moe_router_backward", stream_);
    cuda::moe_router_backward_kernel<<<cuda::moe_warp_blocks(n), 32 * cuda::kMoeRowsPerBlock, 0, stream_>>>(
        dlogits, dweights, probs, experts, dprob_all, n, num_experts, k, renormalize);
    check_launch();
  }
  void moe_permute(int32_t* offsets, int32_t* source_rows, int32_t* slots, const int32_t* experts,
                   int n, int num_experts, int k) override {
    cuda::OpTimes::Scope timed(&op_times_, "moe_permute", stream_);
    cuda::moe_permute_kernel<<<num_experts, cuda::kThreads, 0, stream_>>>(offsets, source_rows, slots, experts,
                                                                         n * k, num_experts, k);
    check_launch();
  }
  void gather_rows(float* dst, const float* src, const int32_t* rows, int m, int dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "gather_rows", stream_);
    if (m == 0) return;
    cuda::gather_rows_kernel<<<m, cuda::kThreads, 0, stream_>>>(dst, src, rows, dim);
    check_launch();
  }
  void moe_combine(float* out, const float* ys, const int32_t* slots, const float* weights, int n,
                   int k, int dim) override {
    cuda::OpTimes::Scope timed(&op_times_, "moe_combine", stream_);
    const size_t total = static_cast<size_t>(n) * dim;
    cuda::moe_combine_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream_>>>(out, ys, slots, weights,
                                                                                   n, k, dim);
    check_launch();
  }
  void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys,
                            const float* weights, const int32_t* slots, int n, int k,
                            int dim) override {
    if (n == 0) return;
    cuda::OpTimes::Scope timed(&op_times_, "moe_combine_backward", stream_);
    const size_t total = static_cast<size_t>(n) * k * dim;
    cuda::moe_spread_gradient_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream_>>>(
        dys, dout, weights, slots, n, k, dim);
    cuda::moe_weight_gradient_kernel<<<cuda::moe_warp_blocks(static_cast<size_t>(n) * k),
                                       32 * cuda::kMoeRowsPerBlock, 0, stream_>>>(dweights, dout, ys, slots,
                                                                                n, k, dim);
    check_launch();
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "residual_forward", stream_);
    cuda::add_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(out, a, b, n);
    check_launch();
  }
  void accumulate(float* dst, const float* src, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "accumulate", stream_);
    cuda::accumulate_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(dst, src, n);
    check_launch();
  }
  void dropout_forward(float* out, const float* x, int rows, int cols,
                       const DropoutMask& mask) override {
    cuda::OpTimes::Scope timed(&op_times_, "dropout_forward", stream_);
    const size_t n = size_t(rows) * cols;
    cuda::dropout_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(out, x, cols, n,
                                                                                     mask);
    check_launch();
  }
  void dropout_backward(float* dx, const float* dout, int rows, int cols,
                        const DropoutMask& mask) override {
    cuda::OpTimes::Scope timed(&op_times_, "dropout_backward", stream_);
    const size_t n = size_t(rows) * cols;
    cuda::dropout_backward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(dx, dout, cols, n,
                                                                                      mask);
    check_launch();
  }
  void cross_entropy_forward_backward(float* losses, float* logits, float* scratch,
                                      const int32_t* targets, int n, int vocab_local,
                                      int vocab_begin, float grad_scale,
                                      const TensorParallelComm* tp) override {
    cuda::OpTimes::Scope timed(&op_times_, "cross_entropy_forward_backward", stream_);
    float *row_max = scratch, *sum_exp = scratch + n, *target_logit = scratch + 2 * n;
    cuda::ce_max_kernel<<<n, kNormBlock, 0, stream_>>>(row_max, logits, vocab_local);
    if (tp && tp->all_reduce_max) tp->all_reduce_max(row_max, n);
    cuda::ce_sum_kernel<<<n, kNormBlock, 0, stream_>>>(sum_exp, target_logit, row_max, logits,
                                                       targets, vocab_local, vocab_begin);
    if (tp && tp->all_reduce_sum) tp->all_reduce_sum(sum_exp, 2 * static_cast<size_t>(n));
    cuda::ce_finish_kernel<<<n, kNormBlock, 0, stream_>>>(losses, logits, row_max, sum_exp,
                                                          target_logit, targets, vocab_local,
                                                          vocab_begin, grad_scale);
    check_launch();
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const AdamWConfig& c, int64_t step, bool decay) override {
    cuda::OpTimes::Scope timed(&op_times_, "adamw_update", stream_);
    const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
    const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
    const float decay_factor = decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
    const auto hit = working_weights().find(params, n);
    if (hit.working && hit.dtype == DType::kF16) {
      cuda::adamw_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          params, grads, m, v, n, c.lr, c.beta1, c.beta2, c.eps, decay_factor, bc1, bc2,
          static_cast<__half*>(hit.working));
    } else {
      cuda::adamw_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          params, grads, m, v, n, c.lr, c.beta1, c.beta2, c.eps, decay_factor, bc1, bc2,
          static_cast<__nv_bfloat16*>(hit.working));
    }
    check_launch();
  }
  double sum_of_squares(const float* x, size_t n) override {
    cuda::OpTimes::Scope timed(&op_times_, "sum_of_squares", stream_);
    const unsigned blocks = std::min<unsigned>(kSumBlocks, cuda::grid_for(n));
    cuda::sum_squares_kernel<<<blocks, cuda::kThreads, 0, stream_>>>(partial_sums_, x, n);
    check_launch();
    copy_to_host(host_partials_.data(), partial_sums_, blocks * sizeof(double));
    double total = 0;
    for (unsigned i = 0; i < blocks; ++i) total += host_partials_[i];
    return total;
  }
  double sum_of_squares_ranges(const std::vector<FloatRange>& ranges) override {
    cuda::OpTimes::Scope timed(&op_times_, "sum_of_squares_ranges", stream_);
    // Each range's blocks write their own slots; one copy brings them all
    // back. Blocks grow with the range (an embedding's gradient is a quarter
    // of a small model's), up to kSumBlocks.
    auto blocks_for = [](size_t n) { return std::min<unsigned>(kSumBlocks, cuda::grid_for(n / 8)); };
    size_t needed = 0;
    for (const auto& r : ranges) needed += r.n ? blocks_for(r.n) : 0;
    ensure_partials(needed);
    size_t slots = 0;
    for (const auto& r : ranges) {
      if (r.n == 0) continue;
      const unsigned blocks = blocks_for(r.n);
      cuda::sum_squares_kernel<<<blocks, cuda::kThreads, 0, stream_>>>(partial_sums_ + slots,
                                                                        r.data, r.n);
      slots += blocks;
    }
    check_launch();
    copy_to_host(host_partials_.data(), partial_sums_, slots * sizeof(double));
    double total = 0;
    for (size_t i = 0; i < slots; ++i) total += host_partials_[i];
    return total;
  }
  void scale(float* x, size_t n, float factor) override {
    cuda::OpTimes::Scope timed(&op_times_, "scale", stream_);
    cuda::scale_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(x, n, factor);
    check_launch();
  }

 private:
  static unsigned norm_threads(int dim) {
    return dim >= 256 ? kNormBlock : static_cast<unsigned>(std::max(32, (dim + 31) / 32 * 32));
  }
  static void check_launch() { COHORT_CUDA_CHECK_FATAL(cudaGetLastError()); }
  // The registered working copy of a weight operand, when it is in the
  // type the GEMMs now take.
  const void* working_for(const float* w, size_t n) const {
    const auto hit = working_weights().find(w, n);
    return hit.working && hit.dtype == matmul_operand_dtype(precision_) ? hit.working : nullptr;
  }
  // The linear layers' 16-bit operand copies; each grows to the largest
  // call's size during the first step and is reused after.
  void ensure_half_operands(size_t x, size_t w, size_t dy) {
    grow_half(&half_.x, &half_capacity_[0], x);
    grow_half(&half_.w, &half_capacity_[1], w);
    grow_half(&half_.dy, &half_capacity_[2], dy);
  }
  void grow_half(void** buffer, size_t* capacity, size_t elements) {
    if (elements <= *capacity) return;
    if (*buffer) {
      synchronize();  // queued GEMMs may still read it
      pool_.release(*buffer);
    }
    *buffer = pool_.allocate(elements * 2);
    *capacity = elements;
  }
  // Slots for per-block partial sums; grows at warm-up (the first norm).
  void ensure_partials(size_t slots) {
    if (slots <= host_partials_.size()) return;
    if (partial_sums_) {
      synchronize();
      pool_.release(partial_sums_);
    }
    partial_sums_ = static_cast<double*>(pool_.allocate(slots * sizeof(double)));
    host_partials_.resize(slots);
  }

  int device_;
  cuda::MemoryPool pool_;
  cudaStream_t stream_ = nullptr;
  cuda::Blas blas_;
  cuda::HalfOperands half_;
  size_t half_capacity_[3] = {0, 0, 0};
  MatmulPrecision precision_ = MatmulPrecision::kBf16;
  int max_shared_ = 48 * 1024;
  double* partial_sums_ = nullptr;
  cuda::OpTimes op_times_;
  std::vector<double> host_partials_;
};

}  // namespace

Result<std::unique_ptr<CudaBackend>> make_cuda_backend(int device, CudaBackendOptions options) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    return unavailable("CUDA device " + std::to_string(device) + " requested but " +
                       std::to_string(count) + " are visible");
  }
  auto backend = std::make_unique<CudaBackendImpl>(device, options.op_times);
  COHORT_RETURN_IF_ERROR(backend->init().with_context("CUDA backend on device " +
                                                      std::to_string(device)));
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace cohort::models
