#include "models/ops/kv_fp8.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "models/quant/fp8_e4m3.h"

namespace cohort::models {

Result<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "bf16") return KvDtype::kBf16;
  if (name == "fp8") return KvDtype::kFp8;
  return invalid_argument("kv_cache_dtype '" + std::string(name) + "': expected bf16 or fp8");
}

const char* kv_dtype_name(KvDtype dtype) { return dtype == KvDtype::kFp8 ? "fp8" : "bf16"; }

float kv_fp8_scale(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  // 2^e >= amax * headroom / 448, the least such e.
  const int e = static_cast<int>(std::ceil(std::log2(double(amax) * kKvFp8Headroom / quant::kE4m3Max)));
  return std::ldexp(1.0f, std::clamp(e, -100, 100));  // far inside fp32's normal range
}

void kv_fp8_encode(const float* values, size_t n, float scale, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) codes[i] = quant::float_to_e4m3(values[i] / scale);
}

void kv_fp8_decode(const uint8_t* codes, size_t n, float scale, float* values) {
  for (size_t i = 0; i < n; ++i) values[i] = quant::e4m3_to_float(codes[i]) * scale;
}

}  // namespace cohort::models
