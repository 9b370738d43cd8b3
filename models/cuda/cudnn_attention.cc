#include "models/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "models/cuda/cudnn_graph.h"

namespace cohort::models::cuda {
namespace {

using cudnn::Dims;
using cudnn::Graph;
using cudnn::TensorRef;

// Tensors the caller binds at execution.
enum Uid : int64_t {
  kQ = 1, kK, kV, kY, kLse, kScale, kNegInf, kDy, kDq, kDk, kDv, kOne, kDsum, kDqAccum,
};

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// [b, h, s, d] views of the packed rows: element (b, h, s, d) of q sits at
// b*T*ld + s*ld + h*D + d.
struct Views {
  int64_t b, hq, hk, s, d;
  Dims q_dims() const { return {b, hq, s, d}; }
  Dims kv_dims() const { return {b, hk, s, d}; }
  Dims kt_dims() const { return {b, hk, d, s}; }
  Dims rows(int64_t ld) const { return {s * ld, d, ld, 1}; }
  Dims rows_t(int64_t ld) const { return {s * ld, d, 1, ld}; }  // [b, h, d, s]
  Dims scores() const { return {b, hq, s, s}; }
  Dims scores_t_strides() const { return {hq * s * s, s * s, 1, s}; }  // [b, h, s_kv, s_q]
  Dims stats() const { return {b, hq, s, 1}; }
};

Views views(const CudnnAttentionShape& s) {
  return {s.B, s.heads, s.kv_heads, s.T, s.head_dim};
}

// scores -> causal mask applied: row (query) index >= column (key) index
// keeps the score, anything else becomes -inf.
Result<TensorRef> causal(Graph& g, const Views& v, const TensorRef& scores, const TensorRef& neg_inf) {
  COHORT_ASSIGN_OR_RETURN(TensorRef row, g.virtual_tensor(CUDNN_DATA_INT32, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef col, g.virtual_tensor(CUDNN_DATA_INT32, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef keep, g.virtual_tensor(CUDNN_DATA_BOOLEAN, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef masked, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_GEN_INDEX, row, scores, nullptr, nullptr, CUDNN_DATA_FLOAT, 2));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_GEN_INDEX, col, scores, nullptr, nullptr, CUDNN_DATA_FLOAT, 3));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_CMP_GE, keep, row, &col, nullptr, CUDNN_DATA_BOOLEAN));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, masked, scores, &neg_inf, &keep));
  return masked;
}

// Forward: y = softmax(mask(scale * q k^T)) v, lse = the softmax's
// log-sum-exp per query.
Result<Graph::Plan> forward_plan(cudnnHandle_t handle, const CudnnAttentionShape& s) {
  const Views v = views(s);
  Graph g(handle);
  COHORT_ASSIGN_OR_RETURN(TensorRef q, g.io(kQ, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef kt, g.io(kK, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.rows_t(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef val, g.io(kV, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef y, g.io(kY, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_y)));
  COHORT_ASSIGN_OR_RETURN(TensorRef lse, g.io(kLse, CUDNN_DATA_FLOAT, v.stats(), cudnn::packed_strides(v.stats())));
  COHORT_ASSIGN_OR_RETURN(TensorRef scale, g.scalar(kScale, CUDNN_DATA_FLOAT));
  COHORT_ASSIGN_OR_RETURN(TensorRef neg_inf, g.scalar(kNegInf, CUDNN_DATA_FLOAT));

  COHORT_ASSIGN_OR_RETURN(TensorRef raw, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef scaled, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_RETURN_IF_ERROR(g.matmul(raw, q, kt));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, scaled, raw, &scale));
  COHORT_ASSIGN_OR_RETURN(TensorRef masked, causal(g, v, scaled, neg_inf));

  COHORT_ASSIGN_OR_RETURN(TensorRef max, g.virtual_tensor(CUDNN_DATA_FLOAT, v.stats()));
  COHORT_ASSIGN_OR_RETURN(TensorRef centred, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef exp, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef sum, g.virtual_tensor(CUDNN_DATA_FLOAT, v.stats()));
  COHORT_ASSIGN_OR_RETURN(TensorRef log_sum, g.virtual_tensor(CUDNN_DATA_FLOAT, v.stats()));
  COHORT_ASSIGN_OR_RETURN(TensorRef p, g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.scores()));
  COHORT_RETURN_IF_ERROR(g.reduction(CUDNN_REDUCE_TENSOR_MAX, max, masked));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_SUB, centred, masked, &max));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_EXP, exp, centred));
  COHORT_RETURN_IF_ERROR(g.reduction(CUDNN_REDUCE_TENSOR_ADD, sum, exp));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_LOG, log_sum, sum));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_ADD, lse, max, &log_sum));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_DIV, p, exp, &sum));
  COHORT_RETURN_IF_ERROR(g.matmul(y, p, val));
  return g.plan();
}

// out [b, kv heads, s, d] = scores^T [b, heads, s_kv, s_q] · rhs [b, heads,
// s_q, d], summed over each group of query heads that share a KV head: the
// scores go to bf16 through a transposed view, as the product's operand.
Status transposed_product(Graph& g, const Views& v, const TensorRef& scores, const TensorRef& rhs,
                          const TensorRef& out) {
  COHORT_ASSIGN_OR_RETURN(TensorRef st, g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.scores(), v.scores_t_strides()));
  COHORT_RETURN_IF_ERROR(g.reshape(st, scores));
  if (v.hq == v.hk) return g.matmul(out, st, rhs);
  COHORT_ASSIGN_OR_RETURN(TensorRef per_query_head, g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.q_dims()));
  COHORT_RETURN_IF_ERROR(g.matmul(per_query_head, st, rhs));
  return g.reduction(CUDNN_REDUCE_TENSOR_ADD, out, per_query_head);
}

// Backward, the softmax gradient written out:
//   dsum = rowsum(dy * y)          P = exp(mask(scale * q k^T) - lse)
//   dV = sum over the group of P^T dy
//   dS = scale * P * (dy v^T - dsum)
//   dK = sum over the group of dS^T q        dQ = dS k (fp32, then bf16)
// `k_view` is the type of the [b, h, s, d] view of k that the dQ product
// reads: cuDNN's own frontend leaves it at the intermediate type (fp32);
// bf16, the stored type, is the other reading tried.
Result<Graph::Plan> backward_plan(cudnnHandle_t handle, const CudnnAttentionShape& s,
                                  cudnnDataType_t k_view) {
  const Views v = views(s);
  Graph g(handle);
  COHORT_ASSIGN_OR_RETURN(TensorRef q, g.io(kQ, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef kt, g.io(kK, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.rows_t(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef vt, g.io(kV, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.rows_t(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef y, g.io(kY, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_y)));
  COHORT_ASSIGN_OR_RETURN(TensorRef dy, g.io(kDy, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_y)));
  COHORT_ASSIGN_OR_RETURN(TensorRef lse, g.io(kLse, CUDNN_DATA_FLOAT, v.stats(), cudnn::packed_strides(v.stats())));
  COHORT_ASSIGN_OR_RETURN(TensorRef dq, g.io(kDq, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef dk, g.io(kDk, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef dv, g.io(kDv, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.rows(s.ld_qkv)));
  COHORT_ASSIGN_OR_RETURN(TensorRef dsum, g.io(kDsum, CUDNN_DATA_FLOAT, v.stats(), cudnn::packed_strides(v.stats())));
  COHORT_ASSIGN_OR_RETURN(TensorRef dq_accum, g.io(kDqAccum, CUDNN_DATA_FLOAT, v.q_dims(), cudnn::packed_strides(v.q_dims())));
  COHORT_ASSIGN_OR_RETURN(TensorRef scale, g.scalar(kScale, CUDNN_DATA_FLOAT));
  COHORT_ASSIGN_OR_RETURN(TensorRef neg_inf, g.scalar(kNegInf, CUDNN_DATA_FLOAT));
  COHORT_ASSIGN_OR_RETURN(TensorRef one, g.scalar(kOne, CUDNN_DATA_FLOAT));

  // dsum = rowsum(dy * y)
  COHORT_ASSIGN_OR_RETURN(TensorRef dy_y, g.virtual_tensor(CUDNN_DATA_FLOAT, v.q_dims()));
  COHORT_ASSIGN_OR_RETURN(TensorRef row_sum, g.virtual_tensor(CUDNN_DATA_FLOAT, v.stats()));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, dy_y, dy, &y));
  COHORT_RETURN_IF_ERROR(g.reduction(CUDNN_REDUCE_TENSOR_ADD, row_sum, dy_y));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, dsum, row_sum, &one));

  // P = exp(mask(scale * q k^T - lse))
  COHORT_ASSIGN_OR_RETURN(TensorRef raw, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef scaled, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef centred, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef p, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_RETURN_IF_ERROR(g.matmul(raw, q, kt));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, scaled, raw, &scale));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_SUB, centred, scaled, &lse));
  COHORT_ASSIGN_OR_RETURN(TensorRef masked, causal(g, v, centred, neg_inf));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_EXP, p, masked));

  // dV = P^T dy, summed over each group of query heads.
  COHORT_RETURN_IF_ERROR(transposed_product(g, v, p, dy, dv));

  // dS = scale * P * (dy v^T - dsum)
  COHORT_ASSIGN_OR_RETURN(TensorRef dp, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef dp_centred, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef dp_p, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_ASSIGN_OR_RETURN(TensorRef ds, g.virtual_tensor(CUDNN_DATA_FLOAT, v.scores()));
  COHORT_RETURN_IF_ERROR(g.matmul(dp, dy, vt));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_SUB, dp_centred, dp, &dsum));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, dp_p, dp_centred, &p));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, ds, dp_p, &scale));

  // dK = dS^T q, summed over each group.
  COHORT_RETURN_IF_ERROR(transposed_product(g, v, ds, q, dk));

  // dQ = dS k, accumulated in fp32 and then rounded into place.
  COHORT_ASSIGN_OR_RETURN(TensorRef k, g.virtual_tensor(k_view, v.kv_dims(), v.rows(s.ld_qkv)));
  COHORT_RETURN_IF_ERROR(g.reshape(k, kt));
  COHORT_RETURN_IF_ERROR(g.matmul(dq_accum, ds, k));
  COHORT_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_IDENTITY, dq, dq_accum));
  return g.plan();
}

}  // namespace

Status cudnn_attention_available() { return status_of(cudnn::api()); }

struct CudnnAttention::Plans {
  CudnnAttentionShape shape;
  Status status;  // why this shape has no plans, or ok
  Graph::Plan forward, backward;
  size_t dsum_bytes = 0, dq_accum_bytes = 0;
  size_t workspace() const {
    return aligned(std::max<int64_t>(forward.workspace, backward.workspace)) + aligned(dsum_bytes) +
           aligned(dq_accum_bytes);
  }
};

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::create() {
  COHORT_ASSIGN_OR_RETURN(const cudnn::Api* api, cudnn::api());
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t s = api->create(&handle);
  if (s != CUDNN_STATUS_SUCCESS) return cudnn::error("cudnnCreate", s);
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(handle));
}

CudnnAttention::CudnnAttention(void* handle) : handle_(handle) {}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // descriptors before the handle
  (*cudnn::api())->destroy(static_cast<cudnnHandle_t>(handle_));
}

const CudnnAttention::Plans* CudnnAttention::find(const CudnnAttentionShape& s) const {
  for (const auto& p : plans_) {
    if (p->shape == s) return p.get();
  }
  return nullptr;
}

Status CudnnAttention::prepare(const CudnnAttentionShape& s) {
  if (const Plans* p = find(s)) return p->status;
  auto plans = std::make_unique<Plans>();
  plans->shape = s;
  auto handle = static_cast<cudnnHandle_t>(handle_);
  auto fwd = forward_plan(handle, s);
  auto bwd = fwd.is_ok() ? backward_plan(handle, s, CUDNN_DATA_FLOAT) : Result<Graph::Plan>(fwd.status());
  if (fwd.is_ok() && !bwd.is_ok()) {
    auto second = backward_plan(handle, s, CUDNN_DATA_BFLOAT16);
    if (second.is_ok()) bwd = std::move(second);
  }
  if (!fwd.is_ok()) {
    plans->status = fwd.status().with_context("cuDNN attention forward");
  } else if (!bwd.is_ok()) {
    plans->status = bwd.status().with_context("cuDNN attention backward");
  } else {
    plans->forward = std::move(fwd).value();
    plans->backward = std::move(bwd).value();
    plans->dsum_bytes = size_t(s.B) * s.heads * s.T * sizeof(float);
    plans->dq_accum_bytes = plans->dsum_bytes * s.head_dim;
  }
  plans_.push_back(std::move(plans));
  return plans_.back()->status;
}

size_t CudnnAttention::workspace_bytes(const CudnnAttentionShape& s) const {
  const Plans* p = find(s);
  return p && p->status.is_ok() ? p->workspace() : 0;
}

Status CudnnAttention::forward(cudaStream_t stream, const CudnnAttentionShape& s, void* y,
                               float* lse, const void* q, const void* k, const void* v,
                               void* workspace) {
  const Plans* p = find(s);
  if (!p || !p->status.is_ok()) return failed_precondition("cuDNN attention: shape not prepared");
  auto handle = static_cast<cudnnHandle_t>(handle_);
  const cudnnStatus_t st = (*cudnn::api())->set_stream(handle, stream);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn::error("cudnnSetStream", st);
  float scale = 1.0f / std::sqrt(float(s.head_dim));
  float neg_inf = -std::numeric_limits<float>::infinity();
  return cudnn::execute(handle, p->forward, {kQ, kK, kV, kY, kLse, kScale, kNegInf},
                        {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), y, lse,
                         &scale, &neg_inf},
                        workspace);
}

Status CudnnAttention::backward(cudaStream_t stream, const CudnnAttentionShape& s, void* dq,
                                void* dk, void* dv, const void* dy, const void* q, const void* k,
                                const void* v, const void* y, const float* lse, void* workspace) {
  const Plans* p = find(s);
  if (!p || !p->status.is_ok()) return failed_precondition("cuDNN attention: shape not prepared");
  auto handle = static_cast<cudnnHandle_t>(handle_);
  const cudnnStatus_t st = (*cudnn::api())->set_stream(handle, stream);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn::error("cudnnSetStream", st);
  float scale = 1.0f / std::sqrt(float(s.head_dim));
  float neg_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;
  // Workspace: the plan's own, then dsum, then the dQ accumulator.
  char* base = static_cast<char*>(workspace);
  void* dsum = base + aligned(std::max<int64_t>(p->forward.workspace, p->backward.workspace));
  void* dq_accum = static_cast<char*>(dsum) + aligned(p->dsum_bytes);
  return cudnn::execute(
      handle, p->backward,
      {kQ, kK, kV, kY, kDy, kLse, kDq, kDk, kDv, kDsum, kDqAccum, kScale, kNegInf, kOne},
      {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), const_cast<void*>(y),
       const_cast<void*>(dy), const_cast<float*>(lse), dq, dk, dv, dsum, dq_accum, &scale, &neg_inf,
       &one},
      workspace);
}

std::string CudnnAttention::describe() const {
  std::string out = fmt::format("cuDNN {}", (*cudnn::api())->get_version());
  for (const auto& p : plans_) {
    const auto& s = p->shape;
    out += fmt::format("; B {} T {} heads {}/{} D {}: ", s.B, s.T, s.heads, s.kv_heads, s.head_dim);
    out += p->status.is_ok() ? fmt::format("forward {}, backward {}", p->forward.engine, p->backward.engine)
                             : p->status.message();
  }
  return out;
}

}  // namespace cohort::models::cuda
