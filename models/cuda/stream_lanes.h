// Side streams that take independent GEMMs off one stream and run them
// side by side, each lane with its own cuBLAS handle (two handles never
// share a workspace). fork() makes every lane wait for the main stream's
// work so far; join() makes the main stream wait for every lane's.
//
// Why: a mixture of experts' per-expert GEMMs are a fraction of a wave each
// on a Hopper GPU (an expert's rows are about tokens × k / experts), so
// launched one after another they leave most multiprocessors idle. Spread
// over lanes they overlap, as Transformer Engine's grouped linear layer
// does with streams of cuBLAS calls.
#pragma once

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <array>

namespace cohort::models::cuda {

class StreamLanes {
 public:
  static constexpr int kLanes = 4;

  StreamLanes() = default;
  StreamLanes(const StreamLanes&) = delete;
  StreamLanes& operator=(const StreamLanes&) = delete;
  ~StreamLanes();

  // Lanes start waiting for `main`'s work so far (created on first use).
  void fork(cudaStream_t main);
  // `main` waits for the work given to every lane since fork().
  void join(cudaStream_t main);
  // The handle of lane i % kLanes, bound to its stream.
  cublasHandle_t handle(int i) const { return lanes_[static_cast<size_t>(i % kLanes)].handle; }

 private:
  struct Lane {
    cudaStream_t stream = nullptr;
    cublasHandle_t handle = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::array<Lane, kLanes> lanes_{};
  cudaEvent_t forked_ = nullptr;
};

}  // namespace cohort::models::cuda
