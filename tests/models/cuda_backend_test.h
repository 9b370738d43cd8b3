// A test fixture with the CUDA backend on device 0 and its copies to and
// from the device, for the GPU parity tests (cuda_parity_test.cc,
// decode_parity.h). Skips with a message where no GPU is visible.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/half_float.h"
#include "models/cuda_backend.h"

namespace cohort::models::testing {

class CudaBackendTest : public ::testing::Test {
 protected:
  // `checks` names the suite in the skip message ("decode kernel parity tests").
  explicit CudaBackendTest(const char* checks) : checks_(checks) {}
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device visible: " << checks_ << " run on the GPU machine";
    }
    gpu_ = std::move(make_cuda_backend(0).value());
  }
  template <typename T>
  T* up(const std::vector<T>& v) {
    T* p = static_cast<T*>(gpu_->alloc(v.size() * sizeof(T)));
    gpu_->copy_from_host(p, v.data(), v.size() * sizeof(T));
    return p;
  }
  std::vector<float> down(const float* p, size_t n) {
    std::vector<float> v(n);
    gpu_->copy_to_host(v.data(), p, n * sizeof(float));
    return v;
  }
  std::vector<float> down_bf16(const uint16_t* p, size_t n) {
    std::vector<uint16_t> bits(n);
    gpu_->copy_to_host(bits.data(), p, n * sizeof(uint16_t));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bf16_bits_to_float(bits[i]);
    return v;
  }
  std::unique_ptr<CudaBackend> gpu_;

 private:
  const char* checks_;
};

}  // namespace cohort::models::testing
