// lora_rows_bench: what served adapters add to a decode step's projections,
// one projection at a time: the projection alone, then the projection
// followed by lora_rows_bf16 over the same rows, as the graph engine
// enqueues them (models/decode/cuda_graph_lora.cc), µs a pair; then the
// projection followed by the dense form (lora_dense_bf16: a shrink GEMM,
// the mask, an expand GEMM, over every adapter side by side), and the same
// with the shrink and mask beside the projection on a stream of their own
// (forked and joined by events in the graph, as the engine does). The
// difference is what one adapted projection costs a step; a Qwen3-0.6B step
// has 28 of each. Then gate/up with its activation: the projection and the
// activation alone, with the dense form (shrink beside, expand, activation),
// and with the expand joined to the activation (lora_swiglu_bf16).
//
//   lora_rows_bench [rows,...] [adapters,...] [rank] [shape]   defaults 16,32,64 0,1,2,8 16 qwen3-0.6b
//
// shape: qwen3-0.6b or qwen3-8b (hidden 4096, q 4096, k/v 1024, intermediate 12288).
//
// Rows take the adapters in turn (as 64 streams over 8 adapters do), sorted
// by adapter (lora_rows_by_adapter); 0 adapters: no row has one. The gate
// and up projection is the unfused form adapters take (both halves into
// fp32, the activation a kernel of its own). Calls follow each other in one
// CUDA graph with programmatic dependent launches, as a step's do; each takes
// the next of several weight copies spanning more than L2.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/graph_timing.h"
#include "models/cuda/cublas_api.h"
#include "models/ops/gemv.h"
#include "models/ops/lora_rows.h"
#include "models/ops/swiglu.h"

namespace {

using cohort::models::Bf16Bits;
namespace mc = cohort::models::cuda;

void check(cudaError_t e, const char* what) { cohort::bench::check_cuda("lora_rows_bench", e, what); }

// A projection as the engine serves it with adapters: `in` inputs, the
// targets' widths side by side in y.
struct Projection {
  const char* name;
  int in;
  std::vector<int> widths;
  bool accumulate;  // o_proj and down_proj add into the residual stream
};

constexpr int kCalls = 200;
constexpr int kSlots = 8;  // adapter table slots

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> rows = argc > 1 ? cohort::bench::parse_int_list(argv[1]) : std::vector<int>{16, 32, 64};
  const std::vector<int> adapter_counts = argc > 2 ? cohort::bench::parse_int_list(argv[2]) : std::vector<int>{0, 1, 2, 8};
  const int rank = argc > 3 ? std::atoi(argv[3]) : 16;
  if (rank < 1 || rank > mc::kLoraMaxRank) {
    std::fprintf(stderr, "lora_rows_bench: rank %d is outside 1..%d\n", rank, mc::kLoraMaxRank);
    return 2;
  }
  for (int n : rows) {
    if (n < 1 || n > 64) {
      std::fprintf(stderr, "lora_rows_bench: %d rows is outside 1..64 (a decode step's projections)\n", n);
      return 2;
    }
  }
  for (int a : adapter_counts) {
    if (a < 0 || a > kSlots) {
      std::fprintf(stderr, "lora_rows_bench: %d adapters is outside 0..%d\n", a, kSlots);
      return 2;
    }
  }
  const std::string shape = argc > 4 ? argv[4] : "qwen3-0.6b";
  if (shape != "qwen3-0.6b" && shape != "qwen3-8b") {
    std::fprintf(stderr, "lora_rows_bench: shape '%s' is not qwen3-0.6b or qwen3-8b\n", shape.c_str());
    return 2;
  }
  const bool big = shape == "qwen3-8b";
  const int H = big ? 4096 : 1024, Qd = big ? 4096 : 2048, KVd = big ? 1024 : 1024, I = big ? 12288 : 3072;
  const Projection projections[] = {{"qkv", H, {Qd, KVd, KVd}, false},
                                    {"o", Qd, {H}, true},
                                    {"gate_up", H, {I, I}, false},
                                    {"down", I, {H}, true}};
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const size_t weight_bytes = (big ? size_t{2048} : size_t{512}) << 20, max_rows = 64, widest = 2 * I;
  void *w = nullptr, *x = nullptr, *y = nullptr;
  check(cudaMalloc(&w, weight_bytes), "malloc");
  check(cudaMalloc(&x, max_rows * widest * 2), "malloc");
  check(cudaMalloc(&y, max_rows * widest * 4), "malloc");
  check(cudaMemset(w, 0, weight_bytes), "memset");
  check(cudaMemset(x, 0, max_rows * widest * 2), "memset");
  check(cudaMemset(y, 0, max_rows * widest * 4), "memset");
  const mc::SkinnyScratch scratch = cohort::bench::alloc_skinny_scratch("lora_rows_bench");

  // Every slot's A [rank, widest in] and B [widest target, rank], both I (zeros: the
  // time does not depend on the values), one table entry per target.
  const int targets_most = mc::kLoraMaxTargets;
  void *adapter_a = nullptr, *adapter_b = nullptr;
  check(cudaMalloc(&adapter_a, size_t(kSlots) * rank * I * 2), "malloc");
  check(cudaMalloc(&adapter_b, size_t(kSlots) * I * rank * 2), "malloc");
  check(cudaMemset(adapter_a, 0, size_t(kSlots) * rank * I * 2), "memset");
  check(cudaMemset(adapter_b, 0, size_t(kSlots) * I * rank * 2), "memset");
  std::vector<const Bf16Bits*> host_a(size_t(targets_most) * kSlots), host_b(host_a.size());
  for (int z = 0; z < targets_most; ++z) {
    for (int s = 0; s < kSlots; ++s) {
      host_a[size_t(z) * kSlots + s] = static_cast<const Bf16Bits*>(adapter_a) + size_t(s) * rank * I;
      host_b[size_t(z) * kSlots + s] = static_cast<const Bf16Bits*>(adapter_b) + size_t(s) * I * rank;
    }
  }
  const std::vector<int32_t> host_ranks(kSlots, rank);
  const std::vector<float> host_scales(kSlots, 2.0f);
  const Bf16Bits **a_table = nullptr, **b_table = nullptr;
  int32_t *ranks = nullptr, *row_adapter = nullptr, *row_order = nullptr;
  float* scales = nullptr;
  check(cudaMalloc(&a_table, host_a.size() * sizeof(void*)), "malloc");
  check(cudaMalloc(&b_table, host_b.size() * sizeof(void*)), "malloc");
  check(cudaMalloc(&ranks, kSlots * 4), "malloc");
  check(cudaMalloc(&scales, kSlots * 4), "malloc");
  check(cudaMalloc(&row_adapter, max_rows * 4), "malloc");
  check(cudaMalloc(&row_order, max_rows * 4), "malloc");
  check(cudaMemcpy(a_table, host_a.data(), host_a.size() * sizeof(void*), cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(b_table, host_b.data(), host_b.size() * sizeof(void*), cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(ranks, host_ranks.data(), kSlots * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(scales, host_scales.data(), kSlots * 4, cudaMemcpyHostToDevice), "copy");

  // The dense form's operands (zeros) for up to every slot, its scratch, and
  // a cuBLAS handle with a workspace of its own (graph capture allocates
  // nothing).
  auto api = cohort::models::cuda::blas::api();
  if (!api.is_ok()) {
    std::fprintf(stderr, "lora_rows_bench: %s\n", api.status().message().c_str());
    return 1;
  }
  const size_t dense_columns = size_t(kSlots) * rank, dense_width = targets_most * dense_columns;
  void *dense_a = nullptr, *dense_b = nullptr, *dense_t = nullptr, *dense_masked = nullptr, *dense_column = nullptr;
  void* workspace = nullptr;
  check(cudaMalloc(&dense_a, dense_width * I * 2), "malloc");
  check(cudaMalloc(&dense_b, dense_width * 2 * I * 2), "malloc");  // block diagonal: Σ width × count·C
  check(cudaMalloc(&dense_t, max_rows * dense_width * 4), "malloc");
  check(cudaMalloc(&dense_masked, max_rows * dense_width * 2), "malloc");
  check(cudaMalloc(&dense_column, kSlots * 4), "malloc");
  check(cudaMalloc(&workspace, size_t{32} << 20), "malloc");
  check(cudaMemset(dense_a, 0, dense_width * I * 2), "memset");
  check(cudaMemset(dense_b, 0, dense_width * 2 * I * 2), "memset");
  std::vector<int32_t> host_column(kSlots);
  for (int s = 0; s < kSlots; ++s) host_column[size_t(s)] = s * rank;
  check(cudaMemcpy(dense_column, host_column.data(), kSlots * 4, cudaMemcpyHostToDevice), "copy");
  cublasContext* blas = nullptr;
  if ((*api)->create(&blas) != CUBLAS_STATUS_SUCCESS ||
      (*api)->set_workspace(blas, workspace, size_t{32} << 20) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "lora_rows_bench: no cuBLAS handle\n");
    return 1;
  }

  std::printf("%s projections, rank %d, %d calls a form; us a call\n", shape.c_str(), rank, kCalls);
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
  check(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatest), "stream");
  check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "event");
  void* h = nullptr;
  check(cudaMalloc(&h, max_rows * I * 2), "malloc");
  std::string activation_table;
  std::printf("| projection | rows | adapters | projection | with LoRA | LoRA adds | dense form adds | "
              "dense, shrink beside, adds |\n|---|---|---|---|---|---|---|---|\n");
  for (const Projection& p : projections) {
    int out = 0;
    for (int width : p.widths) out += width;
    const size_t bytes = size_t(out) * p.in * 2;
    const int copies = static_cast<int>(std::min<size_t>(weight_bytes / bytes, 64));
    auto weights = [&](int i) { return static_cast<const Bf16Bits*>(w) + size_t(i % copies) * bytes / 2; };
    const Bf16Bits* xb = static_cast<const Bf16Bits*>(x);
    float* yf = static_cast<float*>(y);
    const mc::GemvOutput output = p.accumulate ? mc::GemvOutput::kAccumulate : mc::GemvOutput::kStore;
    mc::LoraTargets targets;
    targets.count = static_cast<int>(p.widths.size());
    targets.table_stride = kSlots;
    for (int z = 0, column = 0; z < targets.count; column += p.widths[size_t(z)], ++z) {
      targets.width[z] = p.widths[size_t(z)], targets.column[z] = column;
    }
    for (int n : rows) {
      const double alone = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
        mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
      });
      for (int adapters : adapter_counts) {
        std::vector<int32_t> adapter_of(static_cast<size_t>(n)), order(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) adapter_of[size_t(r)] = adapters > 0 ? r % adapters : -1;
        cohort::models::lora_rows_by_adapter(order.data(), adapter_of.data(), n, kSlots);
        check(cudaMemcpy(row_adapter, adapter_of.data(), size_t(n) * 4, cudaMemcpyHostToDevice), "copy");
        check(cudaMemcpy(row_order, order.data(), size_t(n) * 4, cudaMemcpyHostToDevice), "copy");
        const double paired = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
          mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
          mc::lora_rows_bf16(yf, out, xb, a_table, b_table, ranks, scales, row_adapter, row_order, n, p.in, targets,
                             stream);
        });
        mc::LoraDense dense;
        dense.columns = (adapters * rank + 7) / 8 * 8;
        dense.a = static_cast<const Bf16Bits*>(dense_a);
        dense.b = static_cast<const Bf16Bits*>(dense_b);
        dense.column = static_cast<const int32_t*>(dense_column);
        dense.t = static_cast<float*>(dense_t), dense.masked = static_cast<Bf16Bits*>(dense_masked);
        const double dense_paired = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
          mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
          mc::lora_dense_bf16(blas, yf, out, xb, dense, ranks, scales, row_adapter, n, p.in, targets, stream);
        });
        const double beside = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
          check(cudaEventRecord(fork, stream), "fork");
          check(cudaStreamWaitEvent(side, fork, 0), "fork");
          mc::lora_dense_shrink_bf16(blas, xb, dense, ranks, scales, row_adapter, n, p.in, targets.count, side);
          check(cudaEventRecord(join, side), "join");
          mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
          check(cudaStreamWaitEvent(stream, join, 0), "join");
          mc::lora_dense_expand_bf16(blas, yf, out, dense, n, targets, stream);
        });
        std::printf("| %s [%dx%d] | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", p.name, p.in, out, n, adapters,
                    alone, paired, paired - alone, dense_paired - alone, beside - alone);
        if (p.widths.size() == 2 && adapters > 0) {  // gate and up
          Bf16Bits* hb = static_cast<Bf16Bits*>(h);
          const int inter = p.widths[0];
          auto with_shrink_beside = [&](int i) {
            check(cudaEventRecord(fork, stream), "fork");
            check(cudaStreamWaitEvent(side, fork, 0), "fork");
            mc::lora_dense_shrink_bf16(blas, xb, dense, ranks, scales, row_adapter, n, p.in, 2, side);
            check(cudaEventRecord(join, side), "join");
            mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
            check(cudaStreamWaitEvent(stream, join, 0), "join");
          };
          const double plain = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
            mc::skinny_gemm_bf16(yf, xb, weights(i), n, p.in, out, scratch, stream, output);
            mc::swiglu_bf16(yf, hb, n, inter, stream);
          });
          const double expanded = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
            with_shrink_beside(i);
            mc::lora_dense_expand_bf16(blas, yf, out, dense, n, targets, stream);
            mc::swiglu_bf16(yf, hb, n, inter, stream);
          });
          const double joined = cohort::bench::time_graph_calls("lora_rows_bench", stream, kCalls, [&](int i) {
            with_shrink_beside(i);
            mc::lora_swiglu_bf16(hb, yf, dense, ranks, row_adapter, row_order, n, inter, stream);
          });
          char line[200];
          std::snprintf(line, sizeof line, "| %d | %d | %.2f | %.2f | %.2f |\n", n, adapters, plain, expanded - plain,
                        joined - plain);
          activation_table += line;
        }
        std::fflush(stdout);
      }
    }
  }
  if (!activation_table.empty()) {
    std::printf("\ngate/up with the activation, us a call: the two alone, then what the dense form adds (shrink "
                "beside), expand then activation / expand joined to the activation\n"
                "| rows | adapters | projection + activation | expand, activation | joined |\n|---|---|---|---|---|\n%s",
                activation_table.c_str());
  }
  return 0;
}
