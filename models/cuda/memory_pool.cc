// Caching device allocator.
#include "models/cuda/memory_pool.h"

#include <cuda_runtime.h>

#include "base/check.h"

namespace cohort::models::cuda {

MemoryPool::MemoryPool(int device) : device_(device) {}

MemoryPool::~MemoryPool() {
  cudaSetDevice(device_);
  for (auto& [ptr, size] : size_of_) cudaFree(ptr);
}

void* MemoryPool::allocate(size_t bytes) {
  bytes = (bytes + 511) / 512 * 512 + 512;  // never zero; 512-byte granularity
  auto it = free_.lower_bound(bytes);
  if (it != free_.end() && it->first <= 2 * bytes) {
    void* p = it->second;
    in_use_ += it->first;
    free_.erase(it);
    return p;
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess && !free_.empty()) {
    // Out of memory with cached blocks around: give them back and retry once.
    cudaGetLastError();
    for (auto& [size, ptr] : free_) {
      cudaFree(ptr);
      size_of_.erase(ptr);
      reserved_ -= size;
    }
    free_.clear();
    err = cudaMalloc(&p, bytes);
  }
  COHORT_CHECK_MSG(err == cudaSuccess, "cudaMalloc of {} bytes on device {} failed: {}", bytes,
                   device_, cudaGetErrorString(err));
  ++device_allocations_;
  size_of_[p] = bytes;
  reserved_ += bytes;
  in_use_ += bytes;
  return p;
}

void MemoryPool::release(void* ptr) {
  if (!ptr) return;
  auto it = size_of_.find(ptr);
  COHORT_CHECK_MSG(it != size_of_.end(), "releasing a pointer the pool did not allocate");
  in_use_ -= it->second;
  free_.emplace(it->second, ptr);
}

}  // namespace cohort::models::cuda
