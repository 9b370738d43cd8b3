// What the projection benchmarks share: a CUDA error ends the program naming
// the step, and a projection's time is taken over calls replayed as one CUDA
// graph, as a decode step's kernels are (launched one by one from the host,
// a few microseconds of launch cost each would be timed instead).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "models/ops/gemv.h"

namespace cohort::bench {

// `tool: what: error`, then exit 1, on any error.
inline void check_cuda(const char* tool, cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// "16,32,64" -> {16, 32, 64}: a bench's list arguments.
inline std::vector<int> parse_int_list(const char* text) {
  std::vector<int> values;
  for (const char* p = text; *p;) {
    char* next = nullptr;
    values.push_back(static_cast<int>(std::strtol(p, &next, 10)));
    p = *next == ',' ? next + 1 : next;
  }
  return values;
}

// The skinny GEMM's split-K scratch, its arrival counters zeroed, in device
// memory the program keeps to its end.
inline models::cuda::SkinnyScratch alloc_skinny_scratch(const char* tool) {
  float* partials = nullptr;
  int* arrivals = nullptr;
  check_cuda(tool, cudaMalloc(&partials, models::cuda::kSkinnyScratchFloats * 4), "malloc");
  check_cuda(tool, cudaMalloc(&arrivals, models::cuda::kSkinnyScratchTiles * 4), "malloc");
  check_cuda(tool, cudaMemset(arrivals, 0, models::cuda::kSkinnyScratchTiles * 4), "memset");
  return {partials, arrivals};
}

// µs a call: call(i) for i in [0, calls) captured as one graph, replayed once
// to settle the clocks and once timed; three calls run first, outside the
// capture (first loads, lazy state).
template <typename F>
double time_graph_calls(const char* tool, cudaStream_t stream, int calls, F&& call) {
  auto check = [tool](cudaError_t e, const char* what) { check_cuda(tool, e, what); };
  for (int i = 0; i < 3; ++i) call(i);
  check(cudaStreamSynchronize(stream), "warm-up");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) call(i);
  check(cudaStreamEndCapture(stream, &graph), "capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, stream), "replay");
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "event");
  check(cudaEventCreate(&end), "event");
  check(cudaEventRecord(begin, stream), "record");
  check(cudaGraphLaunch(exec, stream), "replay");
  check(cudaEventRecord(end, stream), "record");
  check(cudaEventSynchronize(end), "sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, begin, end);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  check(cudaGetLastError(), "kernels");
  return 1e3 * ms / calls;
}

}  // namespace cohort::bench
