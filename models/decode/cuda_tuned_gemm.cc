// TunedGemm (cuda_tuned_gemm.h). Column-major, as cuBLAS sees row-major
// buffers: yᵀ [out, n] = op(w)ᵀ [out, in] · xᵀ [in, n], with w read as an
// [in, out] matrix and transposed.
#include "models/decode/cuda_tuned_gemm.h"

#include <algorithm>
#include <string>

#include "base/cuda_check.h"
#include "models/cuda/cublas_api.h"

namespace cohort::models::decode {
namespace {

constexpr int kCandidates = 8;
constexpr int kTimedRuns = 20;

const cuda::blas::Api& B() { return cuda::blas::loaded(); }

Status lt_check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error(std::string("cuBLASLt ") + what + ": status " + std::to_string(status));
}

}  // namespace

Result<std::unique_ptr<TunedGemm>> TunedGemm::create(cudaStream_t stream, void* workspace,
                                                     size_t bytes) {
  COHORT_ASSIGN_OR_RETURN(const cuda::blas::Api* blas, cuda::blas::api());
  cublasLtHandle_t handle = nullptr;
  COHORT_RETURN_IF_ERROR(lt_check(blas->lt_create(&handle), "create"));
  return std::unique_ptr<TunedGemm>(new TunedGemm(handle, stream, workspace, bytes));
}

TunedGemm::~TunedGemm() {
  for (auto& [shape, plan] : plans_) destroy(plan);
  B().lt_destroy(handle_);
}

void TunedGemm::destroy(Plan& plan) {
  if (plan.op) B().matmul_desc_destroy(plan.op);
  if (plan.a) B().layout_destroy(plan.a);
  if (plan.b) B().layout_destroy(plan.b);
  if (plan.c) B().layout_destroy(plan.c);
  plan = Plan{};
}

Result<int> TunedGemm::describe(Plan& plan, int n, int in, int out,
                                cublasLtMatmulHeuristicResult_t* results, int want) {
  COHORT_RETURN_IF_ERROR(
      lt_check(B().matmul_desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  COHORT_RETURN_IF_ERROR(lt_check(B().matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                                 &transpose, sizeof(transpose)),
                                  "transa"));
  COHORT_RETURN_IF_ERROR(lt_check(B().layout_create(&plan.a, CUDA_R_16BF, in, out, in), "a"));
  COHORT_RETURN_IF_ERROR(lt_check(B().layout_create(&plan.b, CUDA_R_16BF, in, n, in), "b"));
  COHORT_RETURN_IF_ERROR(lt_check(B().layout_create(&plan.c, CUDA_R_32F, out, n, out), "c"));
  cublasLtMatmulPreference_t preference = nullptr;
  COHORT_RETURN_IF_ERROR(lt_check(B().preference_create(&preference), "preference"));
  B().preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes_,
                                       sizeof(bytes_));
  int found = 0;
  const cublasStatus_t st = B().algo_heuristic(handle_, plan.op, plan.a, plan.b, plan.c,
                                                           plan.c, preference, want, results, &found);
  B().preference_destroy(preference);
  COHORT_RETURN_IF_ERROR(lt_check(st, "heuristic"));
  if (found == 0) {
    return internal_error("cuBLASLt has no algorithm for [" + std::to_string(n) + "x" +
                          std::to_string(in) + "] x [" + std::to_string(in) + "x" +
                          std::to_string(out) + "]");
  }
  return found;
}

Status TunedGemm::enqueue(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float* y,
                          const models::Bf16Bits* x, const models::Bf16Bits* w) {
  const float alpha = 1.0f, beta = 0.0f;
  return lt_check(B().matmul(handle_, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y,
                                 plan.c, &algo, workspace_, bytes_, stream_),
                  "matmul");
}

Status TunedGemm::run(float* y, const models::Bf16Bits* x, const models::Bf16Bits* w, int n,
                      int in, int out) {
  auto it = plans_.find({n, in, out});
  if (it == plans_.end()) {
    Plan plan;
    cublasLtMatmulHeuristicResult_t best{};
    auto found = describe(plan, n, in, out, &best, 1);
    if (!found.is_ok()) {
      destroy(plan);
      return found.status();
    }
    plan.algo = best.algo;
    it = plans_.emplace(std::make_tuple(n, in, out), plan).first;
  }
  return enqueue(it->second, it->second.algo, y, x, w);
}

Status TunedGemm::tune(float* y, const models::Bf16Bits* x,
                       const std::vector<const models::Bf16Bits*>& weights, int n, int in, int out,
                       int candidates) {
  auto old = plans_.find({n, in, out});
  if (old != plans_.end()) {
    destroy(old->second);
    plans_.erase(old);
  }
  Plan plan;
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  auto found = describe(plan, n, in, out, results, std::clamp(candidates, 1, kCandidates));
  if (!found.is_ok()) {
    destroy(plan);
    return found.status();
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  COHORT_CUDA_CHECK(cudaEventCreate(&start));
  COHORT_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = -1;
  for (int i = 0; i < *found; ++i) {
    // Warm (and a candidate may refuse the shape), then time.
    if (!enqueue(plan, results[i].algo, y, x, weights[0]).is_ok()) continue;
    cudaEventRecord(start, stream_);
    for (int r = 0; r < kTimedRuns; ++r) {
      (void)enqueue(plan, results[i].algo, y, x, weights[(r + 1) % weights.size()]);
    }
    cudaEventRecord(stop, stream_);
    COHORT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (best_ms < 0 || ms < best_ms) best_ms = ms, plan.algo = results[i].algo;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best_ms < 0) {
    destroy(plan);
    return internal_error("cuBLASLt: no candidate ran for [" + std::to_string(n) + "x" +
                          std::to_string(in) + "] x [" + std::to_string(in) + "x" +
                          std::to_string(out) + "]");
  }
  plans_.emplace(std::make_tuple(n, in, out), plan);
  return Status::ok();
}

}  // namespace cohort::models::decode
