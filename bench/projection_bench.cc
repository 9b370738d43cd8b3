// projection_bench: the decode engine's projections one at a time, µs a
// call, for each kernel family that may serve them: cuBLASLt (its candidates
// timed first, as the engine's warm-up does), the skinny tensor-core kernel
// and the staged tiles with each block shape and K split they accept.
//
//   projection_bench [shape] [rows,...]     shape: qwen3-0.6b (default) or qwen3-1.7b
//
// Each timed call takes the next of several weight copies spanning more than
// L2, so that weights come from HBM as in a real step; calls follow each
// other in one CUDA graph, as a step's do. Output: one line per (projection,
// rows, kernel), for bench/RESULTS.md.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/decode/cuda_tuned_gemm.h"
#include "bench/graph_timing.h"
#include "models/ops/gemv.h"

namespace {

using cohort::models::Bf16Bits;
namespace mc = cohort::models::cuda;

void check(cudaError_t e, const char* what) { cohort::bench::check_cuda("projection_bench", e, what); }

struct Projection {
  const char* name;
  int in, out;  // for SwiGLU out is I (the weights hold 2 I rows)
  bool swiglu, accumulate;
};

constexpr int kCalls = 200;

template <typename F>
double time_calls(cudaStream_t stream, F&& call) {
  return cohort::bench::time_graph_calls("projection_bench", stream, kCalls, call);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "qwen3-0.6b";
  const std::vector<int> rows = argc > 2 ? cohort::bench::parse_int_list(argv[2]) : std::vector<int>{16, 32, 48, 64};
  int H = 1024, Qd = 2048, KVd = 1024, I = 3072;
  if (shape == "qwen3-1.7b") {
    H = 2048, Qd = 2048, KVd = 1024, I = 6144;
  } else if (shape != "qwen3-0.6b") {
    std::fprintf(stderr, "projection_bench: unknown shape '%s' (qwen3-0.6b, qwen3-1.7b)\n", shape.c_str());
    return 2;
  }
  const Projection projections[] = {{"qkv", H, Qd + 2 * KVd, false, false},
                                    {"o", Qd, H, false, true},
                                    {"gate_up", H, I, true, false},
                                    {"down", I, H, false, true}};
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  // 512 MB of weights: copies of each projection that together pass L2.
  const size_t weight_bytes = size_t{512} << 20;
  void *w = nullptr, *x = nullptr, *y = nullptr, *workspace = nullptr;
  const size_t max_rows = 64, widest = 2 * 6144 * 2;
  check(cudaMalloc(&w, weight_bytes), "malloc");
  check(cudaMalloc(&x, max_rows * widest * 2), "malloc");
  check(cudaMalloc(&y, max_rows * widest * 4), "malloc");
  check(cudaMalloc(&workspace, size_t{32} << 20), "malloc");
  check(cudaMemset(w, 0, weight_bytes), "memset");
  check(cudaMemset(x, 0, max_rows * widest * 2), "memset");
  check(cudaMemset(y, 0, max_rows * widest * 4), "memset");
  const mc::SkinnyScratch scratch = cohort::bench::alloc_skinny_scratch("projection_bench");
  auto lt = cohort::models::decode::TunedGemm::create(stream, workspace, size_t{32} << 20);
  if (!lt.is_ok()) {
    std::fprintf(stderr, "projection_bench: %s\n", lt.status().message().c_str());
    return 1;
  }
  std::printf("%s shape, %d multiprocessors, %d calls a kernel\n", shape.c_str(), sms, kCalls);
  std::printf("| projection | rows | kernel | us a call | GB/s of weights |\n|---|---|---|---|---|\n");
  for (const Projection& p : projections) {
    const int weight_rows = p.swiglu ? 2 * p.out : p.out;
    const size_t bytes = size_t(weight_rows) * p.in * 2;
    const int copies = static_cast<int>(std::min<size_t>(weight_bytes / bytes, 64));
    auto weights = [&](int i) {
      return static_cast<const Bf16Bits*>(w) + size_t(i % copies) * bytes / 2;
    };
    const Bf16Bits* xb = static_cast<const Bf16Bits*>(x);
    float* yf = static_cast<float*>(y);
    Bf16Bits* h = static_cast<Bf16Bits*>(y);
    const mc::GemvOutput output = p.accumulate ? mc::GemvOutput::kAccumulate : mc::GemvOutput::kStore;
    auto report = [&](int n, const std::string& kernel, double us) {
      std::printf("| %s [%dx%d] | %d | %s | %.2f | %.0f |\n", p.name, p.in, weight_rows, n,
                  kernel.c_str(), us, bytes / us / 1e3);
      std::fflush(stdout);
    };
    for (int n : rows) {
      // cuBLASLt: the projection (both halves for SwiGLU, whose activation
      // is then a kernel of its own in the engine).
      std::vector<const Bf16Bits*> views;
      for (int c = 0; c < copies; ++c) views.push_back(weights(c));
      const cohort::Status tuned = (*lt)->tune(yf, xb, views, n, p.in, weight_rows, 8);
      if (tuned.is_ok()) {
        report(n, "cuBLASLt (tuned)", time_calls(stream, [&](int i) {
                 (void)(*lt)->run(yf, xb, weights(i), n, p.in, weight_rows);
               }));
      }
      // The engine's tensor-core entry: the skinny kernel up to 8 rows, the
      // staged tiles with tile_plan's choice from 9.
      report(n, "skinny_gemm_bf16", time_calls(stream, [&](int i) {
               if (p.swiglu) {
                 mc::skinny_gemm_swiglu_bf16(h, xb, weights(i), n, p.in, p.out, scratch, stream);
               } else {
                 mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, p.out, scratch, stream, output);
               }
             }));
      const mc::TilePlan chosen = mc::tile_plan(n, p.in, p.out, p.swiglu, sms);
      for (int bn : {64, 128}) {
        const int outputs = p.swiglu ? bn / 2 : bn;
        if (p.out % outputs != 0 || n > 64) continue;
        for (int splits : {1, 2, 4, 8}) {
          // 32-row blocks, one per 32 rows, besides one 64-row block.
          for (int mt : {1, 2}) {
          if (p.in % (64 * splits) != 0 || (mt == 2 && n <= 32)) continue;
          const int row_blocks = (n + 32 * mt - 1) / (32 * mt);
          const mc::TilePlan plan{mt, bn, p.out / outputs, splits, row_blocks};
          const bool is_chosen = plan.bn == chosen.bn && plan.splits == chosen.splits &&
                                 plan.mt == chosen.mt && plan.row_blocks == chosen.row_blocks;
          report(n,
                 "tiles bn " + std::to_string(bn) + " x" + std::to_string(plan.tiles) + " splits " +
                     std::to_string(splits) + " rows " + std::to_string(row_blocks) + "x" +
                     std::to_string(32 * mt) + (is_chosen ? " (chosen)" : ""),
                 time_calls(stream, [&](int i) {
                   mc::tile_gemm_bf16(plan, yf, p.swiglu ? h : nullptr, xb, weights(i), n, p.in,
                                      p.out, output, stream);
                 }));
          }
        }
      }
    }
  }
  return 0;
}
