// TunedGemm: the bf16 engine's projections that neither the GEMV nor the
// skinny GEMM takes (models/ops/gemv.h),
//   y [n, out] (fp32) = x [n, in] (bf16) · wᵀ, w [out, in] bf16 row-major,
// through cuBLASLt with the algorithm chosen per shape. For the decode
// buckets the engine calls tune() at warm-up, which times cuBLASLt's top
// heuristic candidates on the real buffers and keeps the fastest: at 16 to
// 64 rows the default pick runs few thread blocks and leaves most of HBM's
// bandwidth unused (bench/RESULTS.md). Other shapes (prefills) take the top
// heuristic, planned once per shape. Plans live as long as the object; run()
// enqueues only, so it can be captured into a CUDA graph.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "models/ops/decode_rows.h"

namespace cohort::models::decode {

class TunedGemm {
 public:
  // `workspace` (device, `bytes`) is shared by every plan; the stream is
  // where run() and tune() enqueue.
  static Result<std::unique_ptr<TunedGemm>> create(cudaStream_t stream, void* workspace,
                                                   size_t bytes);
  ~TunedGemm();
  TunedGemm(const TunedGemm&) = delete;
  TunedGemm& operator=(const TunedGemm&) = delete;

  Status run(float* y, const models::Bf16Bits* x, const models::Bf16Bits* w, int n, int in,
             int out);
  // Times the candidates (synchronising the stream) and keeps the fastest
  // plan for (n, in, out). Each timed run takes the next of `weights` (the
  // layers' copies of this projection), so that, as in a real step, the
  // weights come from HBM and not from L2. Not while capturing. Each
  // candidate costs its kernel's first load and 21 runs, so callers time
  // fewer where the heuristic's order is already good.
  Status tune(float* y, const models::Bf16Bits* x, const std::vector<const models::Bf16Bits*>& weights,
              int n, int in, int out, int candidates = 8);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  TunedGemm(cublasLtHandle_t handle, cudaStream_t stream, void* workspace, size_t bytes)
      : handle_(handle), stream_(stream), workspace_(workspace), bytes_(bytes) {}
  // The shape's descriptors and up to `want` heuristic algorithms, best first.
  Result<int> describe(Plan& plan, int n, int in, int out, cublasLtMatmulHeuristicResult_t* results,
                       int want);
  Status enqueue(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float* y,
                 const models::Bf16Bits* x, const models::Bf16Bits* w);
  static void destroy(Plan& plan);

  cublasLtHandle_t handle_;
  cudaStream_t stream_;
  void* workspace_;
  size_t bytes_;
  std::map<std::tuple<int, int, int>, Plan> plans_;
};

}  // namespace cohort::models::decode
