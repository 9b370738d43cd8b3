#include "models/cuda/stream_lanes.h"

#include "base/cuda_check.h"
#include "models/cuda/cublas_api.h"

namespace cohort::models::cuda {

StreamLanes::~StreamLanes() {
  if (!forked_) return;
  for (Lane& lane : lanes_) {
    blas::loaded().destroy(lane.handle);
    cudaEventDestroy(lane.done);
    cudaStreamDestroy(lane.stream);  // released once its work is done
  }
  cudaEventDestroy(forked_);
}

void StreamLanes::fork(cudaStream_t main) {
  if (!forked_) {
    COHORT_CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
    for (Lane& lane : lanes_) {
      COHORT_CUDA_CHECK_FATAL(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
      COHORT_CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
      COHORT_CUBLAS_CHECK_FATAL(blas::loaded().create(&lane.handle));
      COHORT_CUBLAS_CHECK_FATAL(blas::loaded().set_stream(lane.handle, lane.stream));
    }
  }
  COHORT_CUDA_CHECK_FATAL(cudaEventRecord(forked_, main));
  for (Lane& lane : lanes_) COHORT_CUDA_CHECK_FATAL(cudaStreamWaitEvent(lane.stream, forked_, 0));
}

void StreamLanes::join(cudaStream_t main) {
  for (Lane& lane : lanes_) {
    COHORT_CUDA_CHECK_FATAL(cudaEventRecord(lane.done, lane.stream));
    COHORT_CUDA_CHECK_FATAL(cudaStreamWaitEvent(main, lane.done, 0));
  }
}

}  // namespace cohort::models::cuda
