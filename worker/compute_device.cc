// choose_compute_device and model_communicator (see compute_device.h).
#include "worker/compute_device.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "models/cuda_backend.h"
#ifdef COHORT_HAVE_NCCL
#include "collective/nccl/nccl_communicator.h"
#endif

namespace cohort::worker {

Result<ComputeDevice> choose_compute_device(const collective::World& world, DebugSwitches::Device forced) {
  using Forced = DebugSwitches::Device;
  const int gpus = models::cuda_device_count();
  ComputeDevice device;
  if (forced == Forced::kCpu) return device;
  if (gpus == 0) {
    if (forced == Forced::kCuda) return failed_precondition("COHORT_DEVICE=cuda but no GPU is visible");
    return device;
  }
#if defined(COHORT_HAVE_CUDA) && defined(COHORT_HAVE_NCCL)
  device.gpu = true;
  device.cuda_device = gpus == 1 ? 0 : world.local_rank % gpus;
  device.name = fmt::format("cuda:{}", device.cuda_device);
  return device;
#else
  (void)world;
  if (forced == Forced::kCuda) {
    return failed_precondition("COHORT_DEVICE=cuda but this cohort-worker was built without CUDA");
  }
  spdlog::warn("this worker sees a GPU but cohort-worker was built without CUDA: running on the CPU");
  return device;
#endif
}

Result<std::shared_ptr<collective::Communicator>> model_communicator(const collective::World& world,
                                                                     const ComputeDevice& device) {
  if (!device.gpu) return world.cpu;
#ifdef COHORT_HAVE_NCCL
  collective::NcclOptions options;
  options.device = device.cuda_device;
  auto nccl = collective::init_nccl_world(world, options);
  if (!nccl) return nccl.status().with_context("joining the job's NCCL communicator");
  return std::shared_ptr<collective::Communicator>(std::move(*nccl));
#else
  return failed_precondition("this cohort-worker was built without NCCL");
#endif
}

}  // namespace cohort::worker
