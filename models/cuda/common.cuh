// Shared pieces of the CUDA kernels: launch sizing, bf16 bits and
// warp/block reductions. Included by the two kernel translation units,
// models/cuda/backend_cuda.cu and train_blocks.cu: only inline functions and
// templates here.
#pragma once

#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/check.h"
// COHORT_CUDA_CHECK (Status) in set-up, COHORT_CUDA_CHECK_FATAL in ops and
// launches, which cannot return one.
#include "base/cuda_check.h"
#include "models/cuda/cublas_api.h"

namespace cohort::models::cuda {

constexpr int kThreads = 256;

// A cuBLAS handle (bound to the backend's stream) and the compute type its
// GEMMs use (see ops/linear.cuh).
struct Blas {
  cublasHandle_t handle = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_16BF;
};

// Grid for a grid-stride loop over n elements.
inline unsigned grid_for(size_t n) {
  return static_cast<unsigned>(std::clamp<size_t>((n + kThreads - 1) / kThreads, 1, 65536));
}

// dst[i] = src[i] between f32 and a half type; the half types' conversions
// from float round to nearest even.
template <typename To, typename From>
__global__ void cast_kernel(To* dst, const From* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<To>(static_cast<float>(src[i]));
  }
}

// bf16 stored as its bits (Bf16Bits on the host side) <-> fp32; to bf16
// rounds to nearest even.
__device__ inline float from_bf16_bits(uint16_t v) {
  return __bfloat162float(__ushort_as_bfloat16(v));
}
__device__ inline uint16_t to_bf16_bits(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Two floats as a bf16 pair in one register (lo in the low half), the
// operand form of the mma fragments.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two e4m3 bytes (the low 16 bits of `bits`, the lower byte first) as
// floats: Hopper's cvt to f16x2, exact (e4m3 fits f16), then widened.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t bits) {
  const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// The 8 bf16 of a 16-byte piece as floats.
__device__ __forceinline__ void unpack8_bf16(const uint4& v, float* out) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    out[2 * j] = f.x, out[2 * j + 1] = f.y;
  }
}

// Programmatic dependent launch (sm_90): launch_dependent starts a kernel
// while its predecessor on the stream is still finishing, so that the gap of
// a launch between two short kernels (a decode step is ~250 of them) is
// hidden. A kernel so launched calls begin_dependent() once it has issued
// what it may read early (model weights, tables, row indices copied before
// the step's first kernel): it lets its own successor start launching, then
// waits until the predecessor has completed and its writes are visible.
// Letting the successor launch before the wait keeps two kernels' weight
// loads in flight behind the running one (a batch-1 step: 758 against
// 879 us, bench/RESULTS.md), and stays correct: a kernel completes only
// after its own wait, so each wait covers every earlier kernel, and no
// kernel writes before its wait. Launched the ordinary way, both are no-ops.
__device__ __forceinline__ void begin_dependent() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// launch_dependent's launch, with the blocks grouped in clusters of
// `cluster` along x where cluster > 0 (thread-block clusters, sm_90; the
// grid's x a multiple of it). Returns the launch's error.
// COHORT_CUDA_SERIAL_LAUNCHES=1 turns the early start off (kernel timers).
bool serial_launches();

template <typename... Params, typename... Args>
cudaError_t launch_dependent_in_clusters(void (*kernel)(Params...), dim3 grid, unsigned cluster,
                                         dim3 block, size_t smem, cudaStream_t stream,
                                         Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = serial_launches() ? 0 : 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster > 0 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  launch_dependent_in_clusters(kernel, grid, 0, block, smem, stream, std::forward<Args>(args)...);
}

// Asynchronous copies global -> shared (cp.async, sm_80+): issued now,
// grouped by cp_async_commit(); cp_async_wait<N>() waits until at most N of
// the most recent groups are still in flight, after which the waiting
// thread sees its own copies (other threads' need a barrier). 16 bytes, or
// zeros where !valid (the source is then not read).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid = true) {
  cp_async16(shared_address(dst), src, valid);
}
// 16 bytes into shared memory at a shared-space address.
__device__ __forceinline__ void st_shared16(uint32_t dst, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices from shared memory into mma fragments: lanes 8i to
// 8i + 7 give the row addresses of matrix i, which lands in r[i] (PTX ISA,
// ldmatrix); the .trans form transposes each matrix on the way.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// An attribute of the current device (0 where none is visible).
inline int current_device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&value, attribute, device);
  return value;
}

// The current device's multiprocessors and each one's shared memory in
// bytes, read once (launch sizing).
inline int device_multiprocessors() {
  static const int sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  return sms;
}
inline int device_shared_bytes_per_multiprocessor() {
  static const int bytes = current_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  return bytes;
}

// c += a * b for one 16x8x16 bf16 tile on the tensor cores, fp32
// accumulation (fragment layouts: PTX ISA, mma.m16n8k16).
__device__ inline void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A folded RMSNorm's scale for one row (models/ops/gemv.h's FoldedNorm):
// its sum of squares arrives as `chunks` partial sums, added in order, so
// that every kernel folding the norm scales the row by the same value.
__device__ __forceinline__ float folded_norm_scale(const float* sums, int chunks, int width, float eps) {
  float ss = 0.0f;
  for (int c = 0; c < chunks; ++c) ss += sums[c];
  return rsqrtf(ss / static_cast<float>(width) + eps);
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sums (or maxima) over the block of N values at once, in the barriers of
// one reduction; every thread gets all N. Callable repeatedly: the trailing
// barrier protects the shared slots.
template <bool kMax, int N>
__device__ inline void block_reduce_each(float (&v)[N]) {
  __shared__ float slots[N][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  const float identity = kMax ? -INFINITY : 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = kMax ? warp_max(v[i]) : warp_sum(v[i]);
    if (lane == 0) slots[i][warp] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float x = threadIdx.x < warps ? slots[i][threadIdx.x] : identity;
    if (warp == 0) x = kMax ? warp_max(x) : warp_sum(x);
    if (threadIdx.x == 0) slots[i][0] = x;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = slots[i][0];
  __syncthreads();
}

// Sum (or max) of one value over the block; every thread gets the result.
template <bool kMax>
__device__ inline float block_reduce(float v) {
  float one[1] = {v};
  block_reduce_each<kMax>(one);
  return one[0];
}

}  // namespace cohort::models::cuda
