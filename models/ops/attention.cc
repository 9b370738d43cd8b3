// CPU attention: per (batch, head) sgemms over strided views of q/k/v, so no
// transposes are materialised.
#include "models/ops/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace cohort::models::cpu {
namespace {

// In-place causal softmax of a T x T score matrix; zeroes the upper triangle
// and records each row's log-sum-exp.
void causal_softmax(float* p, float* lse, int T) {
  for (int i = 0; i < T; ++i) {
    float* row = p + static_cast<size_t>(i) * T;
    float mx = row[0];
    for (int j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int j = 0; j <= i; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
    lse[i] = mx + static_cast<float>(std::log(sum));
  }
}

// Scaled scores q_h k_h^T of one (batch, head) into s [T, T].
void scores(float* s, const float* qh, int ldq, const float* kh, int ldk, int T, int D) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, scale, qh, ldq, kh, ldk, 0.0f, s,
              T);
}

}  // namespace

void attention_forward(float* y, float* lse, float* scratch, const float* q, const float* k,
                       const float* v, int B, int T, int heads, int kv_heads, int D) {
  const int ldq = heads * D, ldk = kv_heads * D, group = heads / kv_heads;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<size_t>(b) * T * ldq + h * D;
      const float* kh = k + static_cast<size_t>(b) * T * ldk + (h / group) * D;
      const float* vh = v + static_cast<size_t>(b) * T * ldk + (h / group) * D;
      float* yh = y + static_cast<size_t>(b) * T * ldq + h * D;
      scores(scratch, qh, ldq, kh, ldk, T, D);
      causal_softmax(scratch, lse + (static_cast<size_t>(b) * heads + h) * T, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, scratch, T, vh, ldk,
                  0.0f, yh, ldq);
    }
  }
}

// P = exp(scale q k^T - lse) (recomputed); dP = dY V^T; dV += P^T dY;
// dS = P * (dP - rowsum(P * dP)); dQ += scale dS K; dK += scale dS^T Q.
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy,
                        const float* q, const float* k, const float* v, const float* lse, int B,
                        int T, int heads, int kv_heads, int D) {
  const int ldq = heads * D, ldk = kv_heads * D, group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* p = scratch;
  float* ds = scratch + static_cast<size_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < heads; ++h) {
      const size_t qoff = static_cast<size_t>(b) * T * ldq + h * D;
      const size_t koff = static_cast<size_t>(b) * T * ldk + (h / group) * D;
      const float* row_lse = lse + (static_cast<size_t>(b) * heads + h) * T;
      scores(p, q + qoff, ldq, k + koff, ldk, T, D);
      for (int i = 0; i < T; ++i) {
        float* pi = p + static_cast<size_t>(i) * T;
        for (int j = 0; j < T; ++j) pi[j] = j <= i ? std::exp(pi[j] - row_lse[i]) : 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, 1.0f, dy + qoff, ldq, v + koff,
                  ldk, 0.0f, ds, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, p, T, dy + qoff, ldq,
                  1.0f, dv + koff, ldk);
      for (int i = 0; i < T; ++i) {
        const float* pi = p + static_cast<size_t>(i) * T;
        float* di = ds + static_cast<size_t>(i) * T;
        double dot = 0;
        for (int j = 0; j <= i; ++j) dot += static_cast<double>(pi[j]) * di[j];
        for (int j = 0; j <= i; ++j) di[j] = pi[j] * (di[j] - static_cast<float>(dot));
        for (int j = i + 1; j < T; ++j) di[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, scale, ds, T, k + koff, ldk,
                  1.0f, dq + qoff, ldq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, scale, ds, T, q + qoff, ldq,
                  1.0f, dk + koff, ldk);
    }
  }
}

void attention_cached(float* y, float* scratch, const float* q, const float* kcache,
                      const float* vcache, int m, int first_pos, int capacity, int heads,
                      int kv_heads, int D) {
  const int ldq = heads * D, group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int t = 0; t < m; ++t) {
    const int len = first_pos + t + 1;
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<size_t>(t) * ldq + h * D;
      const float* kh = kcache + static_cast<size_t>(h / group) * capacity * D;
      const float* vh = vcache + static_cast<size_t>(h / group) * capacity * D;
      float mx = -INFINITY;
      for (int j = 0; j < len; ++j) {
        float s = 0;
        for (int d = 0; d < D; ++d) s += qh[d] * kh[static_cast<size_t>(j) * D + d];
        scratch[j] = s * scale;
        mx = std::max(mx, scratch[j]);
      }
      double sum = 0;
      for (int j = 0; j < len; ++j) {
        scratch[j] = std::exp(scratch[j] - mx);
        sum += scratch[j];
      }
      float* yh = y + static_cast<size_t>(t) * ldq + h * D;
      for (int d = 0; d < D; ++d) yh[d] = 0.0f;
      const float inv = static_cast<float>(1.0 / sum);
      for (int j = 0; j < len; ++j) {
        const float w = scratch[j] * inv;
        const float* vj = vh + static_cast<size_t>(j) * D;
        for (int d = 0; d < D; ++d) yh[d] += w * vj[d];
      }
    }
  }
}

void kv_cache_write(float* cache, const float* src, int m, int first_pos, int capacity,
                    int kv_heads, int D) {
  for (int t = 0; t < m; ++t) {
    for (int h = 0; h < kv_heads; ++h) {
      const float* s = src + (static_cast<size_t>(t) * kv_heads + h) * D;
      float* d = cache + (static_cast<size_t>(h) * capacity + first_pos + t) * D;
      std::copy(s, s + D, d);
    }
  }
}

}  // namespace cohort::models::cpu
