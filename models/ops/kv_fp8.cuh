// Device side of the fp8 KV cache (format: kv_fp8.h): the codes a kernel
// writes, and the staging of cache pieces that the attention kernels share,
// for either element type. Included by rope.cuh, decode_qkv.cuh and the
// attention kernels.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "models/cuda/common.cuh"
#include "models/ops/decode_rows.h"

namespace cohort::models::cuda {

// value / scale as e4m3, nearest even, saturated at +-448: the scale is a
// power of two, so this equals the host's float_to_e4m3(value / scale).
__device__ __forceinline__ uint8_t kv_fp8_code(float value, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value / scale, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float kv_fp8_value(uint8_t code, float scale) {
  return e4m3x2_to_float2(code).x * scale;
}

// 8 codes (the low byte first) as floats times the scale.
__device__ __forceinline__ void unpack8_e4m3(uint32_t lo, uint32_t hi, float scale, float* out) {
  const uint32_t words[2] = {lo, hi};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 f = e4m3x2_to_float2(words[w] >> (16 * half));
      out[4 * w + 2 * half] = f.x * scale, out[4 * w + 2 * half + 1] = f.y * scale;
    }
  }
}

// A head's K and V scales (1 for a bf16 cache, which never uses them).
struct KvScales {
  float k = 1.0f, v = 1.0f;
};
__device__ __forceinline__ KvScales kv_scales(const KvView& cache, int hkv, int kv) {
  KvScales s;
  if (cache.fp8()) s.k = __ldg(cache.fp8_scales + kv), s.v = __ldg(cache.fp8_scales + hkv + kv);
  return s;
}

// 8 e4m3 codes times the scale as 8 bf16 (exact: kv_fp8.h), the low code first.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 raw, float scale) {
  float f[8];
  unpack8_e4m3(raw.x, raw.y, scale, f);
  return uint4{pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7])};
}

// 8 codes of an fp8 cache at element `at` (zeros where !valid).
__device__ __forceinline__ uint2 load_kv_codes8(const void* cache, size_t at, bool valid) {
  return valid ? *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + at) : make_uint2(0u, 0u);
}

// 8 cached values starting at element `at` into shared memory at `dst` as
// bf16 (16 bytes), zeros where !valid: a bf16 cache copies asynchronously
// (cp.async, waited for with the caller's groups); an fp8 one loads its 8
// bytes, scales them and stores at once (exact: kv_fp8.h). Loops over
// tiles that want the fp8 loads in flight while they compute load the
// codes into registers first (load_kv_codes8) and store them after
// (e4m3x8_to_bf16x8).
template <bool kFp8>
__device__ __forceinline__ void stage_kv8(uint32_t dst, const void* cache, size_t at, bool valid, float scale) {
  if constexpr (!kFp8) {
    cp_async16(dst, static_cast<const Bf16Bits*>(cache) + at, valid);
  } else {
    st_shared16(dst, e4m3x8_to_bf16x8(load_kv_codes8(cache, at, valid), scale));
  }
}

// 8 bytes global -> shared, asynchronously (cp.async.ca: the .cg form
// takes only 16), zeros where !valid.
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid = true) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0));
}

// Raises *amax to `value` (both >= 0: their bits order as the floats do).
__device__ __forceinline__ void raise_amax(float* amax, float value) {
  atomicMax(reinterpret_cast<int*>(amax), __float_as_int(value));
}

}  // namespace cohort::models::cuda
