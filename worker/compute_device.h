// Where a built-in worker computes, and the communicator its model tensors
// travel on: one rule for train, infer and serve.
//
// The device is the GPU this worker was given (the only one visible under
// "own" device visibility, LOCAL_RANK's under "node") when cohort was built
// with CUDA, else the CPU. The debugging switch COHORT_DEVICE forces one
// (debug_switches.h): `cpu` keeps a worker that sees a GPU on the CPU
// (parity checks), `cuda` fails where there is none. Model tensors travel over NCCL on that GPU,
// else over the world's CPU communicator.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "collective/bootstrap.h"
#include "worker/debug_switches.h"

namespace cohort::worker {

struct ComputeDevice {
  bool gpu = false;
  int cuda_device = -1;       // the CUDA ordinal on a GPU
  std::string name = "cpu";   // "cpu", "cuda:0": for logs and metrics
};

Result<ComputeDevice> choose_compute_device(const collective::World& world, DebugSwitches::Device forced);

// NCCL over world.cpu on the device's GPU (every rank calls it), or
// world.cpu itself on the CPU.
Result<std::shared_ptr<collective::Communicator>> model_communicator(const collective::World& world,
                                                                     const ComputeDevice& device);

}  // namespace cohort::worker
