// The operation × dtype × count matrix one rank runs against a Communicator,
// with the buffers in whatever memory the communicator works on (host for
// gloo/mpi, device for nccl through a Memory that copies).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

#include "collective/communicator.h"

namespace cohort::collective::testing {

// Where the communicator's buffers live.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
};

class HostMemory final : public Memory {
 public:
  void* alloc(size_t bytes) override { return ::operator new(bytes + 1); }
  void release(void* p) override { ::operator delete(p); }
  void upload(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override {
    std::memcpy(host, src, bytes);
  }
};

// Runs the whole matrix; prints one "FAIL rank r: ..." line per wrong case
// and returns how many there were. `big` adds that element count for a
// subset (f32, bf16, i32 × all_reduce sum, reduce_scatter sum, all_gather);
// 0 leaves it out. `unpaired_p2p` also runs the ring with separately posted
// send and recv (not for NCCL, where a lone recv blocks the stream).
int run_matrix(Communicator& comm, size_t big, Memory* memory = nullptr, bool unpaired_p2p = true);

}  // namespace cohort::collective::testing
