#include "models/cuda/cublas_api.h"

#include <atomic>
#include <string>

#include "base/check.h"
#include "base/dynamic_library.h"

namespace cohort::models::cuda::blas {
namespace {

// The major version the headers were built against: its libraries keep the
// ABI the table's signatures name.
const std::string kCublasSuffix = ".so." + std::to_string(CUBLAS_VER_MAJOR);

std::atomic<bool> g_cublas_opened{false};

// The GEMMs' declared types are those of the exported functions: a cast
// selects an overload only of exactly this type (unevaluated: nothing links).
static_assert(sizeof(static_cast<decltype(Api::gemm_ex)>(&::cublasGemmEx)) > 0);
static_assert(sizeof(static_cast<decltype(Api::gemm_strided_batched_ex)>(&::cublasGemmStridedBatchedEx)) > 0);

Result<const Api*> load() {
  // Kept open for the process: handles live until exit. cuBLASLt first, so
  // a missing one is named rather than reported as cuBLAS's dependency.
  static DynamicLibrary lt;
  static DynamicLibrary blas;
  COHORT_ASSIGN_OR_RETURN(lt, DynamicLibrary::open("libcublasLt" + kCublasSuffix));
  COHORT_ASSIGN_OR_RETURN(blas, DynamicLibrary::open("libcublas" + kCublasSuffix));
  g_cublas_opened = true;
  static Api table;
  COHORT_RETURN_IF_ERROR(blas.require("cublasCreate_v2", &table.create));
  COHORT_RETURN_IF_ERROR(blas.require("cublasDestroy_v2", &table.destroy));
  COHORT_RETURN_IF_ERROR(blas.require("cublasSetStream_v2", &table.set_stream));
  COHORT_RETURN_IF_ERROR(blas.require("cublasSetWorkspace_v2", &table.set_workspace));
  COHORT_RETURN_IF_ERROR(blas.require("cublasGemmEx", &table.gemm_ex));
  COHORT_RETURN_IF_ERROR(blas.require("cublasGemmStridedBatchedEx", &table.gemm_strided_batched_ex));
  COHORT_RETURN_IF_ERROR(blas.require("cublasGemmGroupedBatchedEx", &table.gemm_grouped_batched_ex));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtCreate", &table.lt_create));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtDestroy", &table.lt_destroy));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmulDescCreate", &table.matmul_desc_create));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmulDescDestroy", &table.matmul_desc_destroy));
  COHORT_RETURN_IF_ERROR(
      lt.require("cublasLtMatmulDescSetAttribute", &table.matmul_desc_set_attribute));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatrixLayoutCreate", &table.layout_create));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatrixLayoutDestroy", &table.layout_destroy));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmulPreferenceCreate", &table.preference_create));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmulPreferenceDestroy", &table.preference_destroy));
  COHORT_RETURN_IF_ERROR(
      lt.require("cublasLtMatmulPreferenceSetAttribute", &table.preference_set_attribute));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmulAlgoGetHeuristic", &table.algo_heuristic));
  COHORT_RETURN_IF_ERROR(lt.require("cublasLtMatmul", &table.matmul));
  return &table;
}

}  // namespace

Result<const Api*> api() {
  static const Result<const Api*> result = load();  // once, thread-safe
  return result;
}

const Api& loaded() {
  static const Api* const table = [] {
    Result<const Api*> r = api();
    COHORT_CHECK_MSG(r.is_ok(), "cuBLAS is needed here: {}", r.status().message());
    return *r;
  }();
  return *table;
}

bool opened() { return g_cublas_opened; }

}  // namespace cohort::models::cuda::blas
