// Finite-difference gradient checking for the CPU fp32 ops and the model.
// Central differences in fp32 are good to ~1e-3 relative, so checks compare
// whole gradient vectors: ||analytic - numeric|| / ||numeric|| < tol.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace cohort::models::testing {

// ||want - got|| / ||want||, infinite where got holds a non-finite value
// (an output element never written, when outputs start as NaN).
inline double norm_relative(const std::vector<float>& want, const std::vector<float>& got) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (double(want[i]) - got[i]) * (double(want[i]) - got[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-20);
}

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Numeric gradient of loss() with respect to x[indices] (all when empty).
inline std::vector<double> numeric_gradient(std::vector<float>& x,
                                            const std::function<double()>& loss,
                                            const std::vector<size_t>& indices = {},
                                            float h = 1e-2f) {
  std::vector<size_t> idx = indices;
  if (idx.empty()) {
    for (size_t i = 0; i < x.size(); ++i) idx.push_back(i);
  }
  std::vector<double> g;
  for (size_t i : idx) {
    const float saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    g.push_back((plus - minus) / (2.0 * h));
  }
  return g;
}

inline double relative_error(const std::vector<double>& numeric,
                             const std::vector<double>& analytic) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    diff += (numeric[i] - analytic[i]) * (numeric[i] - analytic[i]);
    norm += numeric[i] * numeric[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

// sum(out * weights) in double: a scalar loss with a dense, known gradient.
inline double weighted_sum(const float* out, const std::vector<float>& weights) {
  double s = 0;
  for (size_t i = 0; i < weights.size(); ++i) s += static_cast<double>(out[i]) * weights[i];
  return s;
}

inline std::vector<double> pick(const std::vector<float>& v, const std::vector<size_t>& idx) {
  std::vector<double> out;
  if (idx.empty()) return std::vector<double>(v.begin(), v.end());
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

}  // namespace cohort::models::testing
