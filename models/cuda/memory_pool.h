// A caching device-memory pool: the training step never calls cudaMalloc.
//
// allocate() reuses the smallest free block that fits (whole blocks, no
// splitting, and only when at most twice the request, to bound waste) and
// falls back to cudaMalloc during warm-up; release() returns a block to the
// pool. Memory goes back to the driver only when the pool is destroyed.
// device_allocations() counts cudaMalloc calls, so tests can assert that a
// warmed-up step made none. One thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace cohort::models::cuda {

class MemoryPool {
 public:
  explicit MemoryPool(int device);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  void* allocate(size_t bytes);  // CHECK-fails when the device is out of memory
  void release(void* ptr);

  size_t reserved_bytes() const { return reserved_; }
  size_t in_use_bytes() const { return in_use_; }
  int64_t device_allocations() const { return device_allocations_; }

 private:
  int device_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> size_of_;
  size_t reserved_ = 0, in_use_ = 0;
  int64_t device_allocations_ = 0;
};

}  // namespace cohort::models::cuda
