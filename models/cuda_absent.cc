// Builds without the CUDA toolkit: no devices.
#include "models/cuda_backend.h"

namespace cohort::models {

int cuda_device_count() {
  return 0;
}

}  // namespace cohort::models
