// quant_projection_bench: the decode engine's quantized projections one at a
// time, µs a call and the GB/s of weight bytes (codes, scales, zeros) that
// makes, for the Llama-3.1-8B / Qwen3-8B shape (or qwen3-0.6b):
//
//   quant_projection_bench [shape] [rows,...] [formats]    formats: int4,fp8 (default both)
//
// Up to 8 rows a call goes to quant_gemv (the tensor-core form where the
// format has one; COHORT_QUANT_MMA=0 for the CUDA-core GEMV), 9 to 64 to
// the skinny tensor-core form; fp8 beyond 8 rows also through the FP8
// tensor cores as the engine runs it (rows quantized per 128 columns, then
// cuBLASLt's block-scaled GEMM, then for gate_up the SwiGLU), up to 256. Each timed call takes the next of several
// weight copies spanning more than L2, so the codes come from HBM as in a
// step; the calls are replayed as one CUDA graph, as a step's are.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/graph_timing.h"
#include "models/decode/cuda_tuned_gemm.h"
#include "models/ops/fp8_rows.h"
#include "models/ops/quant_gemv.h"
#include "models/ops/swiglu.h"

namespace {

using cohort::models::Bf16Bits;
using cohort::models::RowPackedView;
namespace mc = cohort::models::cuda;
namespace quant = cohort::models::quant;

void check(cudaError_t e, const char* what) { cohort::bench::check_cuda("quant_projection_bench", e, what); }

struct Projection {
  const char* name;
  int in, out;  // SwiGLU: out is I (the weight holds 2 I rows)
  bool swiglu, accumulate;
};

constexpr int kCalls = 200;

template <typename F>
double time_calls(cudaStream_t stream, F&& call) {
  return cohort::bench::time_graph_calls("quant_projection_bench", stream, kCalls, call);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "qwen3-8b";
  const std::vector<int> rows = cohort::bench::parse_int_list(argc > 2 ? argv[2] : "1,2,4,8,16,64");
  const std::string formats = argc > 3 ? argv[3] : "int4,fp8";
  int H = 4096, Qd = 4096, KVd = 1024, I = 12288;
  if (shape == "qwen3-0.6b") {
    H = 1024, Qd = 2048, KVd = 1024, I = 3072;
  } else if (shape != "qwen3-8b") {
    std::fprintf(stderr, "quant_projection_bench: unknown shape '%s' (qwen3-8b, qwen3-0.6b)\n", shape.c_str());
    return 2;
  }
  const Projection projections[] = {{"qkv", H, Qd + 2 * KVd, false, false},
                                    {"o", Qd, H, false, true},
                                    {"gate_up", H, I, true, false},
                                    {"down", I, H, false, true}};
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const size_t pool_bytes = size_t{640} << 20;  // copies of each projection that together pass L2
  uint8_t* pool = nullptr;
  check(cudaMalloc(&pool, pool_bytes), "malloc");
  {
    std::vector<uint8_t> noise(size_t{64} << 20);
    std::mt19937 gen(7);
    for (auto& b : noise) b = static_cast<uint8_t>(gen() & 0x77);  // finite e4m3 and any nibbles
    for (size_t at = 0; at < pool_bytes; at += noise.size()) {
      check(cudaMemcpy(pool + at, noise.data(), std::min(noise.size(), pool_bytes - at), cudaMemcpyHostToDevice),
            "upload");
    }
  }
  const size_t max_rows = 256, widest = size_t{2} * 12288;
  void *x = nullptr, *y = nullptr;
  check(cudaMalloc(&x, max_rows * widest * 2), "malloc");
  check(cudaMalloc(&y, max_rows * widest * 4), "malloc");
  check(cudaMemset(x, 0, max_rows * widest * 2), "memset");
  check(cudaMemset(y, 0, max_rows * widest * 4), "memset");
  const mc::SkinnyScratch scratch = cohort::bench::alloc_skinny_scratch("quant_projection_bench");
  void *workspace = nullptr, *fp8_x = nullptr, *fp8_scales = nullptr, *block_scales = nullptr, *gate_up = nullptr;
  const size_t workspace_bytes = size_t{32} << 20;
  check(cudaMalloc(&workspace, workspace_bytes), "malloc");
  check(cudaMalloc(&fp8_x, max_rows * widest), "malloc");
  check(cudaMalloc(&fp8_scales, max_rows * widest / 128 * 4), "malloc");
  check(cudaMalloc(&gate_up, max_rows * widest * 4), "malloc");
  {
    const std::vector<float> ones(widest * widest / (128 * 128), 0.01f);
    check(cudaMalloc(&block_scales, ones.size() * 4), "malloc");
    check(cudaMemcpy(block_scales, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice), "scales");
  }
  auto lt = cohort::models::decode::TunedGemm::create(stream, workspace, workspace_bytes);
  if (!lt.is_ok()) {
    std::fprintf(stderr, "quant_projection_bench: %s\n", lt.status().message().c_str());
    return 1;
  }

  std::printf("| format | projection | rows | kernel | us | weight GB/s |\n|---|---|---|---|---|---|\n");
  for (const std::string format : {"int4", "fp8"}) {
    if (formats.find(format) == std::string::npos) continue;
    const bool int4 = format == "int4";
    for (const Projection& p : projections) {
      const int weight_rows = p.swiglu ? 2 * p.out : p.out;
      const size_t groups = (p.in + 127) / 128;
      const size_t code_bytes = size_t(weight_rows) * p.in / (int4 ? 2 : 1);
      const size_t param_bytes = size_t(weight_rows) * groups * 4;
      const size_t copy_bytes = (code_bytes + 2 * param_bytes + 255) / 256 * 256;
      const int copies = static_cast<int>(std::max<size_t>(1, pool_bytes / copy_bytes));
      std::vector<RowPackedView> views(copies);
      std::vector<float> params(size_t(weight_rows) * groups);
      for (int c = 0; c < copies; ++c) {
        uint8_t* base = pool + size_t(c) * copy_bytes;
        RowPackedView& v = views[c];
        v.kind = int4 ? quant::CodeKind::kUint4 : quant::CodeKind::kE4m3;
        v.rows = weight_rows, v.cols = p.in, v.group = 128;
        v.codes = base;
        float* scales = reinterpret_cast<float*>(base + code_bytes);
        std::fill(params.begin(), params.end(), 0.01f);
        check(cudaMemcpy(scales, params.data(), param_bytes, cudaMemcpyHostToDevice), "scales");
        v.scales = scales;
        if (int4) {
          float* zeros = scales + params.size();
          std::fill(params.begin(), params.end(), 8.0f);
          check(cudaMemcpy(zeros, params.data(), param_bytes, cudaMemcpyHostToDevice), "zeros");
          v.zeros = zeros;
          v.centred = true;  // cohort's int4: every zero 8, which the tensor-core form does not read
        }
      }
      const size_t bytes = code_bytes + (int4 ? 2 : 1) * param_bytes;
      for (int n : rows) {
        if (n < 1 || n > int(max_rows)) continue;
        const bool gemv = n <= mc::kQuantGemvMaxRows;
        const auto out = p.accumulate ? mc::GemvOutput::kAccumulate : mc::GemvOutput::kStore;
        const auto* xb = static_cast<const Bf16Bits*>(x);
        if (n <= 64) {
          const double us = time_calls(stream, [&](int i) {
            const RowPackedView& v = views[i % copies];
            if (gemv && p.swiglu) mc::quant_gemv_swiglu(static_cast<Bf16Bits*>(y), xb, v, n, stream);
            if (gemv && !p.swiglu) mc::quant_gemv(static_cast<float*>(y), xb, v, n, stream, out);
            if (!gemv && p.swiglu) mc::quant_skinny_swiglu(static_cast<Bf16Bits*>(y), xb, v, n, scratch, stream);
            if (!gemv && !p.swiglu) mc::quant_skinny_gemm(static_cast<float*>(y), xb, v, n, scratch, stream, out);
          });
          std::printf("| %s | %s [%d x %d] | %d | %s | %.1f | %.0f |\n", format.c_str(), p.name, weight_rows, p.in,
                      n, gemv ? "quant_gemv" : "quant_skinny", us, bytes / us * 1e-3);
        }
        if (int4 || gemv) continue;
        const int n_pad = cohort::models::fp8_rows_padded(n);
        const double us = time_calls(stream, [&](int i) {
          const RowPackedView& v = views[i % copies];
          mc::quantize_rows_e4m3(static_cast<uint8_t*>(fp8_x), static_cast<float*>(fp8_scales), xb, n, n_pad, p.in,
                                 stream);
          cohort::models::decode::TunedGemm::Fp8Operands operands;
          operands.x = static_cast<const uint8_t*>(fp8_x), operands.x_scales = static_cast<const float*>(fp8_scales);
          operands.w = v.codes, operands.w_scales = static_cast<const float*>(block_scales);
          float* target = p.swiglu ? static_cast<float*>(gate_up) : static_cast<float*>(y);
          const auto s = (*lt)->run_fp8(target, operands, n_pad, p.in, weight_rows, p.accumulate);
          if (!s.is_ok()) {
            std::fprintf(stderr, "quant_projection_bench: %s\n", s.message().c_str());
            std::exit(1);
          }
          if (p.swiglu) mc::swiglu_bf16(target, static_cast<Bf16Bits*>(y), n, p.out, stream);
        });
        std::printf("| %s | %s [%d x %d] | %d | fp8_gemm | %.1f | %.0f |\n", format.c_str(), p.name, weight_rows, p.in,
                    n, us, (code_bytes + code_bytes / (128 * 128) * 4) / us * 1e-3);
      }
    }
  }
  return 0;
}
