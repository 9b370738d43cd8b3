// Device buffers for the GPU kernel tests: uploads (fp32 as is, bf16
// rounded), NaN-filled outputs so that an unwritten element fails the
// comparison, and downloads that synchronise and check the device first.
// Freed with the test. Host code only (CUDA runtime and cuda_bf16.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/tensor.h"

namespace cohort::models::testing {

// bf16 round trip on the host (round to nearest even, as the kernels).
inline std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

// cuda_device_count() from the runtime directly: a test that compiles the
// kernels itself (train_kernels_gpu_test.cu) must not link the backend's
// CUDA objects, which define the same kernels.
inline bool gpu_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return false;
  }
  return true;
}

class GpuBuffers {
 public:
  using bf16 = __nv_bfloat16;
  GpuBuffers() = default;
  GpuBuffers(const GpuBuffers&) = delete;
  GpuBuffers& operator=(const GpuBuffers&) = delete;
  ~GpuBuffers() {
    for (void* p : owned_) cudaFree(p);
  }

  float* f32(const std::vector<float>& v) {
    float* p = alloc<float>(v.size());
    cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
    return p;
  }
  bf16* half(const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
    bf16* p = alloc<bf16>(v.size());
    cudaMemcpy(p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
    return p;
  }
  template <typename T>
  T* alloc(size_t n) {  // NaN-filled (0xff bytes are NaN in fp32 and bf16)
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    cudaMemset(p, 0xff, n * sizeof(T));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  std::vector<float> down(const float* p, size_t n) {
    std::vector<float> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return v;
  }
  std::vector<float> down(const bf16* p, size_t n) {
    std::vector<uint16_t> bits(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(bits.data(), p, n * 2, cudaMemcpyDeviceToHost);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(bits[i]);
    return v;
  }

 private:
  std::vector<void*> owned_;
};

}  // namespace cohort::models::testing
