// RoPE tables (HF-compatible, including rope_type "llama3") and the CPU rotation.
#include "models/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "models/ops/attention.h"
#include "models/ops/rmsnorm.h"

namespace cohort::models {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(c.rope_theta, exponent);
  }
  if (!c.rope_scaling.enabled) return inv;
  // transformers' _compute_llama3_parameters, step by step.
  const RopeScaling& r = c.rope_scaling;
  const float old_len = static_cast<float>(r.original_max_position);
  const float low_wavelen = old_len / r.low_freq_factor;
  const float high_wavelen = old_len / r.high_freq_factor;
  const float pi = 3.14159265358979323846f;
  for (int i = 0; i < half; ++i) {
    const float wavelen = 2.0f * pi / inv[i];
    float scaled = wavelen > low_wavelen ? inv[i] / r.factor : inv[i];
    const float smooth =
        (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / r.factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    inv[i] = medium ? smoothed : scaled;
  }
  return inv;
}

RopeTable make_rope_table(const ModelConfig& c) {
  RopeTable t;
  t.max_seq = c.max_seq;
  t.half = c.head_dim / 2;
  const std::vector<float> inv = rope_inv_freq(c);
  t.cos.resize(static_cast<size_t>(t.max_seq) * t.half);
  t.sin.resize(t.cos.size());
  for (int p = 0; p < t.max_seq; ++p) {
    for (int i = 0; i < t.half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];
      t.cos[static_cast<size_t>(p) * t.half + i] = std::cos(angle);
      t.sin[static_cast<size_t>(p) * t.half + i] = std::sin(angle);
    }
  }
  return t;
}

}  // namespace cohort::models

namespace cohort::models::cpu {
namespace {

// sign = +1 rotates forward, -1 applies the inverse (transposed) rotation.
void rotate(float* x, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
            const float* sin, float sign) {
  const int half = head_dim / 2;
  for (int t = 0; t < n; ++t) {
    const float* c = cos + static_cast<size_t>(pos[t]) * half;
    const float* s = sin + static_cast<size_t>(pos[t]) * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<size_t>(t) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - sign * b * s[i];
        v[i + half] = b * c[i] + sign * a * s[i];
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                  const float* sin) {
  rotate(x, pos, n, heads, head_dim, cos, sin, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                   const float* sin) {
  rotate(dx, pos, n, heads, head_dim, cos, sin, -1.0f);
}

// Row by row: the ops the fused kernel stands for, in its order.
void qkv_rope_cache(float* q_out, float* k_cache, float* v_cache, const float* qkv,
                    const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* cos, const float* sin, DecodeRows rows, int n,
                    const DecodeShape& s) {
  const int D = s.head_dim, heads = s.hq + 2 * s.hkv;
  const size_t ld = static_cast<size_t>(heads) * D;
  std::vector<float> row(ld);
  for (int r = 0; r < n; ++r) {
    for (size_t j = 0; j < ld; ++j) row[j] = qkv[r * ld + j] + (qkv_bias ? qkv_bias[j] : 0.0f);
    float* q = row.data();
    float* k = q + static_cast<size_t>(s.hq) * D;
    float* v = k + static_cast<size_t>(s.hkv) * D;
    if (q_norm) rmsnorm_forward(q, nullptr, q, q_norm, s.hq, D, s.eps);
    if (k_norm) rmsnorm_forward(k, nullptr, k, k_norm, s.hkv, D, s.eps);
    const int32_t pos = rows.positions[r];
    rope_forward(q, &pos, 1, s.hq, D, cos, sin);
    rope_forward(k, &pos, 1, s.hkv, D, cos, sin);
    std::copy(q, q + static_cast<size_t>(s.hq) * D, q_out + static_cast<size_t>(r) * s.hq * D);
    for (int h = 0; h < s.hkv; ++h) {
      const size_t at = cache_offset(rows, s, rows.slots[r], h, pos);
      std::copy(k + static_cast<size_t>(h) * D, k + static_cast<size_t>(h + 1) * D, k_cache + at);
      std::copy(v + static_cast<size_t>(h) * D, v + static_cast<size_t>(h + 1) * D, v_cache + at);
    }
  }
}

}  // namespace cohort::models::cpu
