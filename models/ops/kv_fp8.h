// The fp8 KV cache's number format (serve.kv_cache_dtype = "fp8"; the
// kernels that read and write it: decode_attention.h, prefill_attention.h,
// rope.h's qkv_rope_cache).
//
// Each cached K or V value is an e4m3 byte (models/quant/fp8_e4m3.h) times
// a scale of its (layer, KV head), one for K and one for V: half the bytes
// of bf16, so the same memory holds twice the positions. The scales are
// powers of two, so that a value's code is float_to_e4m3(value / scale)
// exactly on the host and the GPU alike, and a code read back is exact in
// fp32 and in bf16 (e4m3's 3 mantissa bits fit bf16's 7): the attention
// kernels see exactly the values this file's decode gives.
//
// A head's scale comes from the largest |value| it writes over a
// calibration prefill at the engine's start (kv_fp8_scale): that value maps
// to between 112 and 224 of e4m3's 448, leaving at least 2x headroom for
// larger values later; beyond 448 codes saturate. e4m3 keeps 3 mantissa
// bits (a relative step of 1/16 at worst) from 2^-6 of the scale up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace cohort::models {

enum class KvDtype { kBf16, kFp8 };

// "bf16" or "fp8" (the job file's kv_cache_dtype); anything else is an
// error naming what was given.
Result<KvDtype> parse_kv_dtype(std::string_view name);
const char* kv_dtype_name(KvDtype dtype);
// Bytes one cached value takes.
inline size_t kv_value_bytes(KvDtype dtype) { return dtype == KvDtype::kFp8 ? 1 : 2; }

// Headroom of a calibrated scale over the largest value calibration saw.
inline constexpr float kKvFp8Headroom = 2.0f;

// The least power of two s with amax * kKvFp8Headroom / s <= 448 (the
// largest e4m3); 1 where amax is 0, negative or not finite.
float kv_fp8_scale(float amax);

// codes[i] = float_to_e4m3(values[i] / scale); values[i] = e4m3 * scale.
void kv_fp8_encode(const float* values, size_t n, float scale, uint8_t* codes);
void kv_fp8_decode(const uint8_t* codes, size_t n, float scale, float* values);

}  // namespace cohort::models
