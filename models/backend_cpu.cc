// CpuBackend: host memory and the fp32 reference ops in models/ops/*.cc.
//
// With a half matmul precision the linear layers' operands are rounded to
// that type before the fp32 GEMM, reproducing the tensor cores' numerics
// (and fp16's overflow) so that mixed-precision training, loss scaling
// included, can be exercised without a GPU.
#include <cblas.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "models/backend.h"
#include "models/ops/attention.h"
#include "models/ops/cross_entropy.h"
#include "models/ops/embedding.h"
#include "models/ops/linear.h"
#include "models/ops/moe_routing.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/rope.h"
#include "models/ops/swiglu.h"
#include "models/tensor.h"

namespace cohort::models {
namespace {

struct CpuCopyPlan final : CopyPlan {
  std::vector<CopyRange> ranges;
};

class CpuBackend final : public Backend {
  static constexpr size_t kMappedBytes = size_t{16} << 20;
  std::mutex mapped_mu_;
  std::unordered_map<void*, size_t> mapped_;  // mapped buffers and their sizes

 public:
  Device device() const override { return Device::kCpu; }
  // Zeroed memory, 64-byte aligned for vector loads. Large buffers are
  // mapped pages, which the kernel zeroes as they are first touched: a 0.6B
  // model's 2.4 GB of weights then cost no up-front memset, and the threads
  // that load them fault their own pages in parallel.
  void* alloc(size_t bytes) override {
    if (bytes >= kMappedBytes) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      COHORT_CHECK_MSG(p != MAP_FAILED, "out of host memory mapping {} bytes", bytes);
      std::lock_guard<std::mutex> lock(mapped_mu_);
      mapped_[p] = bytes;
      return p;
    }
    // At least one byte so pointers differ.
    const size_t rounded = (bytes + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, rounded);
    COHORT_CHECK_MSG(p != nullptr, "out of host memory allocating {} bytes", bytes);
    std::memset(p, 0, rounded);
    return p;
  }
  void free(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(mapped_mu_);
      auto it = mapped_.find(ptr);
      if (it != mapped_.end()) {
        munmap(ptr, it->second);
        mapped_.erase(it);
        return;
      }
    }
    std::free(ptr);
  }
  void zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    std::memmove(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    std::memmove(host, src, bytes);
  }
  void cast_to_half(void* dst, DType half, const float* src, size_t n) override {
    COHORT_CHECK(half == DType::kBF16 || half == DType::kF16);
    convert_from_f32(dst, half, src, n);
  }
  void cast_from_half(float* dst, const void* src, DType half, size_t n) override {
    COHORT_CHECK(half == DType::kBF16 || half == DType::kF16);
    convert_to_f32(dst, src, half, n);
  }
  void dequantize_rows(float* dst, const quant::RowPackedView& w) override { quant::dequantize(w, dst); }
  std::unique_ptr<CopyPlan> make_copy_plan(const std::vector<CopyRange>& ranges) override {
    auto plan = std::make_unique<CpuCopyPlan>();
    plan->ranges = ranges;
    return plan;
  }
  void run_copy_plan(const CopyPlan& plan, float* dst, const void* src, DType src_dtype) override {
    COHORT_CHECK(src_dtype != DType::kI32);
    const size_t element = dtype_size(src_dtype);
    for (const auto& r : static_cast<const CpuCopyPlan&>(plan).ranges)
      convert_to_f32(dst + r.dst_offset, static_cast<const char*>(src) + r.src_offset * element, src_dtype, r.n);
  }
  void set_matmul_precision(MatmulPrecision precision) override { precision_ = precision; }
  MatmulPrecision matmul_precision() const override { return precision_; }

  void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                         int vocab_begin, int rows) override {
    cpu::embedding_forward(out, ids, table, n, dim, vocab_begin, rows);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n, int dim,
                          int vocab_begin, int rows) override {
    cpu::embedding_backward(dtable, dout, ids, n, dim, vocab_begin, rows);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n, int dim,
                       float eps) override {
    cpu::rmsnorm_forward(out, rstd, x, w, n, dim, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int n, int dim) override {
    cpu::rmsnorm_backward(dx, dw, dout, x, w, rstd, n, dim);
  }
  void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) override {
    if (precision_ != MatmulPrecision::kFp32) {
      x = rounded(x, size_t(n) * in, &scratch_[0]);
      w = weight_operand(w, size_t(out) * in, &scratch_[1]);
    }
    cpu::linear_forward(y, x, w, b, n, in, out);
  }
  void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, int n, int in, int out) override {
    if (precision_ != MatmulPrecision::kFp32) {
      if (dw) x = rounded(x, size_t(n) * in, &scratch_[0]);  // a frozen weight reads no x
      if (dx) w = weight_operand(w, size_t(out) * in, &scratch_[1]);
      dy = rounded(dy, size_t(n) * out, &scratch_[2]);
    }
    cpu::linear_backward(dx, dw, db, dy, x, w, n, in, out);
  }
  void rope_forward(float* x, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                    const float* sin) override {
    cpu::rope_forward(x, pos, n, heads, head_dim, cos, sin);
  }
  void rope_backward(float* dx, const int32_t* pos, int n, int heads, int head_dim,
                     const float* cos, const float* sin) override {
    cpu::rope_backward(dx, pos, n, heads, head_dim, cos, sin);
  }
  void attention_forward(float* y, float* lse, float* scratch, const float* q, const float* k,
                         const float* v, int B, int T, int heads, int kv_heads,
                         int head_dim) override {
    cpu::attention_forward(y, lse, scratch, q, k, v, B, T, heads, kv_heads, head_dim);
  }
  void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy, const float* /*y*/,
                          const float* q, const float* k, const float* v, const float* lse, int B,
                          int T, int heads, int kv_heads, int head_dim) override {
    cpu::attention_backward(dq, dk, dv, scratch, dy, q, k, v, lse, B, T, heads, kv_heads, head_dim);
  }
  void kv_cache_write(float* cache, const float* src, int m, int first_pos, int capacity,
                      int kv_heads, int head_dim) override {
    cpu::kv_cache_write(cache, src, m, first_pos, capacity, kv_heads, head_dim);
  }
  void attention_cached(float* y, float* scratch, const float* q, const float* kcache,
                        const float* vcache, int m, int first_pos, int capacity, int heads,
                        int kv_heads, int head_dim) override {
    cpu::attention_cached(y, scratch, q, kcache, vcache, m, first_pos, capacity, heads, kv_heads,
                          head_dim);
  }
  void swiglu_forward(float* h, const float* g, const float* u, size_t n) override {
    cpu::swiglu_forward(h, g, u, n);
  }
  void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                       size_t n) override {
    cpu::swiglu_backward(dg, du, dh, g, u, n);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void moe_router_forward(float* probs, int32_t* experts, float* weights, float* prob_sums,
                          const float* logits, int n, int num_experts, int k,
                          bool renormalize) override {
    cpu::moe_router_forward(probs, experts, weights, prob_sums, logits, n, num_experts, k, renormalize);
  }
  void moe_router_backward(float* dlogits, const float* dweights, const float* probs,
                           const int32_t* experts, const float* dprob_all, int n, int num_experts,
                           int k, bool renormalize) override {
    cpu::moe_router_backward(dlogits, dweights, probs, experts, dprob_all, n, num_experts, k, renormalize);
  }
  void moe_permute(int32_t* offsets, int32_t* source_rows, int32_t* slots, const int32_t* experts,
                   int n, int num_experts, int k) override {
    cpu::moe_permute(offsets, source_rows, slots, experts, n, num_experts, k);
  }
  void gather_rows(float* dst, const float* src, const int32_t* rows, int m, int dim) override {
    cpu::gather_rows(dst, src, rows, m, dim);  // ops/embedding.h
  }
  void moe_combine(float* out, const float* ys, const int32_t* slots, const float* weights, int n,
                   int k, int dim) override {
    cpu::moe_combine(out, ys, slots, weights, n, k, dim);
  }
  void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys,
                            const float* weights, const int32_t* slots, int n, int k,
                            int dim) override {
    cpu::moe_combine_backward(dys, dweights, dout, ys, weights, slots, n, k, dim);
  }
  void accumulate(float* dst, const float* src, size_t n) override {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  }
  void dropout_forward(float* out, const float* x, int rows, int cols,
                       const DropoutMask& mask) override {
    cpu::dropout_forward(out, x, rows, cols, mask);
  }
  void dropout_backward(float* dx, const float* dout, int rows, int cols,
                        const DropoutMask& mask) override {
    cpu::dropout_backward(dx, dout, rows, cols, mask);
  }
  void cross_entropy_forward_backward(float* losses, float* logits, float* scratch,
                                      const int32_t* targets, int n, int vocab_local,
                                      int vocab_begin, float grad_scale,
                                      const TensorParallelComm* tp) override {
    cpu::cross_entropy_forward_backward(losses, logits, scratch, targets, n, vocab_local,
                                        vocab_begin, grad_scale, tp);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const AdamWConfig& config, int64_t step, bool decay) override {
    cpu::adamw_update(params, grads, m, v, n, config, step, decay);
    refresh_working_weights(params, n);
  }
  double sum_of_squares(const float* x, size_t n) override { return cpu::sum_of_squares(x, n); }
  double sum_of_squares_ranges(const std::vector<FloatRange>& ranges) override {
    double total = 0;
    for (const auto& r : ranges) total += cpu::sum_of_squares(r.data, r.n);
    return total;
  }
  void scale(float* x, size_t n, float factor) override { cpu::scale(x, n, factor); }

 private:
  // A copy of src[0, n) rounded to the matmul precision, in *scratch (grown
  // at the first step, reused after).
  const float* rounded(const float* src, size_t n, std::vector<float>* scratch) const {
    scratch->resize(std::max(scratch->size(), n));
    float* out = scratch->data();
    if (precision_ == MatmulPrecision::kBf16) {
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(src[i]));
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(src[i]));
    }
    return out;
  }

  // A weight operand: its registered working copy widened (what a GPU reads
  // as 16-bit values), or the master rounded now.
  const float* weight_operand(const float* w, size_t n, std::vector<float>* scratch) const {
    auto hit = working_weights().find(w, n);
    if (!hit.working || hit.dtype != matmul_operand_dtype(precision_)) return rounded(w, n, scratch);
    scratch->resize(std::max(scratch->size(), n));
    convert_to_f32(scratch->data(), hit.working, hit.dtype, n);
    return scratch->data();
  }

  MatmulPrecision precision_ = MatmulPrecision::kFp32;
  std::vector<float> scratch_[3];
};

}  // namespace

const char* matmul_precision_name(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kFp32: return "fp32";
    case MatmulPrecision::kBf16: return "bf16";
    case MatmulPrecision::kFp16: return "fp16";
  }
  return "?";
}

DType matmul_operand_dtype(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kFp32: return DType::kF32;
    case MatmulPrecision::kBf16: return DType::kBF16;
    case MatmulPrecision::kFp16: return DType::kF16;
  }
  return DType::kF32;
}

std::unique_ptr<Backend> make_cpu_backend() {
  // cohort runs one rank per core on CPU; OpenBLAS's own threads would only
  // oversubscribe (and spin). OPENBLAS_NUM_THREADS, when set, wins.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  return std::make_unique<CpuBackend>();
}

}  // namespace cohort::models
