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
//
// The FP8 form (run_fp8) multiplies e4m3 weights with one scale per
// 128 x 128 block by e4m3 activations with one scale per row and 128
// columns (models/ops/fp8_rows.h) on Hopper's FP8 tensor cores, through
// cuBLASLt's block-scaled modes (BLK128x128_32F for the weight, the A
// operand; VEC128_32F for the activations, B), accumulating in fp32: half
// the weight bytes of bf16 and twice its tensor-core rate.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
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

  // run_fp8's operands (device memory).
  struct Fp8Operands {
    const uint8_t* x = nullptr;       // [n, in] e4m3
    const float* x_scales = nullptr;  // [in / 128, n] (fp8_rows.h's layout)
    const uint8_t* w = nullptr;       // [out, in] e4m3, row-major
    const float* w_scales = nullptr;  // [out / 128, fp8_scale_stride(in)], row-major
  };
  // Row stride of a weight's block scales: the blocks along `in`, rounded up
  // to 4 (the padding cuBLASLt's 128 x 128 mode expects).
  static int fp8_scale_stride(int in) { return ((in / 128) + 3) & ~3; }
  // y [n, out] (fp32) = x · wᵀ, or y += it (`accumulate`). n a multiple of
  // 4, in and out of 128.
  Status run_fp8(float* y, const Fp8Operands& operands, int n, int in, int out, bool accumulate);
  // Whether cuBLASLt has an algorithm for that form and shape (none before
  // Hopper, or in a library without block scaling).
  bool fp8_supported(int n, int in, int out);
  // tune() for the FP8 form: each timed run takes the next of `operands`
  // (the layers' weights and their scales; the same activations).
  Status tune_fp8(float* y, const std::vector<Fp8Operands>& operands, int n, int in, int out, bool accumulate,
                  int candidates = 8);

 private:
  enum class Kind { kBf16, kFp8, kFp8Accumulate };
  struct Plan {
    Kind kind = Kind::kBf16;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  TunedGemm(cublasLtHandle_t handle, cudaStream_t stream, void* workspace, size_t bytes)
      : handle_(handle), stream_(stream), workspace_(workspace), bytes_(bytes) {}
  // The shape's descriptors and up to `want` heuristic algorithms, best first.
  Result<int> describe(Plan& plan, int n, int in, int out, cublasLtMatmulHeuristicResult_t* results,
                       int want);
  // The plan for (kind, n, in, out) with the top heuristic algorithm,
  // made on first use.
  Result<Plan*> planned(Kind kind, int n, int in, int out);
  Status enqueue(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float* y,
                 const models::Bf16Bits* x, const models::Bf16Bits* w);
  Status enqueue_fp8(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float* y, const Fp8Operands& operands);
  // Times up to `candidates` of the heuristic's algorithms for (kind, n,
  // in, out), run(plan, algo, r) enqueuing the r-th run, and keeps the fastest.
  using Enqueue = std::function<Status(const Plan&, const cublasLtMatmulAlgo_t&, size_t)>;
  Status tune_plan(Kind kind, int n, int in, int out, int candidates, const Enqueue& run);
  static void destroy(Plan& plan);

  cublasLtHandle_t handle_;
  cudaStream_t stream_;
  void* workspace_;
  size_t bytes_;
  std::map<std::tuple<Kind, int, int, int>, Plan> plans_;
};

}  // namespace cohort::models::decode
