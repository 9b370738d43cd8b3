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

Status check_fp8_shape(int n, int in, int out) {
  if (n % 4 == 0 && in % 128 == 0 && out % 128 == 0) return Status::ok();
  return invalid_argument("e4m3 GEMM of [" + std::to_string(n) + "x" + std::to_string(in) + "] x [" +
                          std::to_string(in) + "x" + std::to_string(out) +
                          "]: rows must be a multiple of 4 and widths of 128");
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
  const bool fp8 = plan.kind != Kind::kBf16;
  COHORT_RETURN_IF_ERROR(
      lt_check(B().matmul_desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value, const char* what) {
    return lt_check(B().matmul_desc_set_attribute(plan.op, attribute, &value, sizeof(value)), what);
  };
  const cublasOperation_t transpose = CUBLAS_OP_T;
  COHORT_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSA, transpose, "transa"));
  if (fp8) {
    const int32_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t rows_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    COHORT_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, weight_mode, "a scale mode"));
    COHORT_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, rows_mode, "b scale mode"));
    // The heuristic refuses block scaling without scale tensors: a
    // placeholder until run_fp8 sets each call's own.
    COHORT_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, workspace_, "a scale"));
    COHORT_RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, workspace_, "b scale"));
  }
  const cudaDataType_t operands = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  COHORT_RETURN_IF_ERROR(lt_check(B().layout_create(&plan.a, operands, in, out, in), "a"));
  COHORT_RETURN_IF_ERROR(lt_check(B().layout_create(&plan.b, operands, in, n, in), "b"));
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
    return internal_error(std::string("cuBLASLt has no ") + (fp8 ? "block-scaled e4m3" : "bf16") +
                          " algorithm for [" + std::to_string(n) + "x" + std::to_string(in) + "] x [" +
                          std::to_string(in) + "x" + std::to_string(out) + "]");
  }
  return found;
}

Result<TunedGemm::Plan*> TunedGemm::planned(Kind kind, int n, int in, int out) {
  auto it = plans_.find({kind, n, in, out});
  if (it == plans_.end()) {
    Plan plan;
    plan.kind = kind;
    cublasLtMatmulHeuristicResult_t best{};
    auto found = describe(plan, n, in, out, &best, 1);
    if (!found.is_ok()) {
      destroy(plan);
      return found.status();
    }
    plan.algo = best.algo;
    it = plans_.emplace(std::make_tuple(kind, n, in, out), plan).first;
  }
  return &it->second;
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
  COHORT_ASSIGN_OR_RETURN(Plan * plan, planned(Kind::kBf16, n, in, out));
  return enqueue(*plan, plan->algo, y, x, w);
}

Status TunedGemm::enqueue_fp8(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float* y,
                              const Fp8Operands& operands) {
  // The scales are the operands' own: set on the descriptor for this call
  // (a graph captures the pointers with the launch).
  COHORT_RETURN_IF_ERROR(lt_check(B().matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                &operands.w_scales, sizeof(operands.w_scales)),
                                  "a scale"));
  COHORT_RETURN_IF_ERROR(lt_check(B().matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                &operands.x_scales, sizeof(operands.x_scales)),
                                  "b scale"));
  const float alpha = 1.0f, beta = plan.kind == Kind::kFp8Accumulate ? 1.0f : 0.0f;
  return lt_check(B().matmul(handle_, plan.op, &alpha, operands.w, plan.a, operands.x, plan.b, &beta, y, plan.c, y,
                             plan.c, &algo, workspace_, bytes_, stream_),
                  "e4m3 matmul");
}

Status TunedGemm::run_fp8(float* y, const Fp8Operands& operands, int n, int in, int out, bool accumulate) {
  COHORT_RETURN_IF_ERROR(check_fp8_shape(n, in, out));
  COHORT_ASSIGN_OR_RETURN(Plan * plan, planned(accumulate ? Kind::kFp8Accumulate : Kind::kFp8, n, in, out));
  return enqueue_fp8(*plan, plan->algo, y, operands);
}

bool TunedGemm::fp8_supported(int n, int in, int out) {
  if (!check_fp8_shape(n, in, out).is_ok()) return false;
  return planned(Kind::kFp8, n, in, out).is_ok();
}

Status TunedGemm::tune(float* y, const models::Bf16Bits* x,
                       const std::vector<const models::Bf16Bits*>& weights, int n, int in, int out,
                       int candidates) {
  return tune_plan(Kind::kBf16, n, in, out, candidates,
                   [&](const Plan& plan, const cublasLtMatmulAlgo_t& algo, size_t r) {
                     return enqueue(plan, algo, y, x, weights[r % weights.size()]);
                   });
}

Status TunedGemm::tune_fp8(float* y, const std::vector<Fp8Operands>& operands, int n, int in, int out,
                           bool accumulate, int candidates) {
  COHORT_RETURN_IF_ERROR(check_fp8_shape(n, in, out));
  return tune_plan(accumulate ? Kind::kFp8Accumulate : Kind::kFp8, n, in, out, candidates,
                   [&](const Plan& plan, const cublasLtMatmulAlgo_t& algo, size_t r) {
                     return enqueue_fp8(plan, algo, y, operands[r % operands.size()]);
                   });
}

Status TunedGemm::tune_plan(Kind kind, int n, int in, int out, int candidates, const Enqueue& run) {
  auto old = plans_.find({kind, n, in, out});
  if (old != plans_.end()) {
    destroy(old->second);
    plans_.erase(old);
  }
  Plan plan;
  plan.kind = kind;
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
    if (!run(plan, results[i].algo, 0).is_ok()) continue;
    cudaEventRecord(start, stream_);
    for (int r = 0; r < kTimedRuns; ++r) (void)run(plan, results[i].algo, size_t(r) + 1);
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
  plans_.emplace(std::make_tuple(kind, n, in, out), plan);
  return Status::ok();
}

}  // namespace cohort::models::decode
