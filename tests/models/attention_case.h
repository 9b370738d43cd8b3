// One causal attention case on the fused blocks' layout, for the GPU
// attention tests: random bf16-rounded q, k, v, dy, the CPU fp32 reference
// (models/ops/attention.h) forward and backward, and the packing into rows
// of [q | k | v] (stride ld) that the fused kernels read in place.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "models/ops/attention.h"
#include "tests/models/gpu_buffers.h"
#include "tests/models/grad_check.h"

namespace cohort::models::testing {

struct AttentionCase {
  AttentionCase(int batch, int seq, int heads, int kv_heads, int head_dim)
      : B(batch), T(seq), hq(heads), hkv(kv_heads), D(head_dim) {}
  int B, T, hq, hkv, D;
  int N() const { return B * T; }
  int qd() const { return hq * D; }
  int kvd() const { return hkv * D; }
  int ld() const { return qd() + 2 * kvd(); }
  std::string name() const {
    return "D " + std::to_string(D) + " B " + std::to_string(B) + " T " + std::to_string(T) +
           " heads " + std::to_string(hq) + "/" + std::to_string(hkv);
  }

  // Inputs and the reference: y, lse, and the gradients of sum(y * dy).
  std::vector<float> q, k, v, dy, y, lse, dq, dk, dv;

  void make(uint32_t seed) {
    q = rounded(random_vector(size_t(N()) * qd(), seed));
    k = rounded(random_vector(size_t(N()) * kvd(), seed + 1));
    v = rounded(random_vector(size_t(N()) * kvd(), seed + 2));
    dy = rounded(random_vector(size_t(N()) * qd(), seed + 3));
    y.assign(q.size(), 0.f), lse.assign(size_t(B) * hq * T, 0.f);
    dq.assign(q.size(), 0.f), dk.assign(k.size(), 0.f), dv.assign(v.size(), 0.f);
    std::vector<float> scratch(attention_scratch_floats(T, hq));
    cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), B, T, hq,
                           hkv, D);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dy.data(), q.data(),
                            k.data(), v.data(), lse.data(), B, T, hq, hkv, D);
  }

  // Rows of [q | k | v].
  std::vector<float> packed() const {
    std::vector<float> qkv(size_t(N()) * ld());
    for (int r = 0; r < N(); ++r) {
      std::copy_n(&q[size_t(r) * qd()], qd(), &qkv[size_t(r) * ld()]);
      std::copy_n(&k[size_t(r) * kvd()], kvd(), &qkv[size_t(r) * ld() + qd()]);
      std::copy_n(&v[size_t(r) * kvd()], kvd(), &qkv[size_t(r) * ld() + qd() + kvd()]);
    }
    return qkv;
  }
  // Rows of [dq | dk | dv] back into their three matrices, each compared
  // with the reference's at `tol` (norm-relative).
  void expect_gradients(const std::vector<float>& got, double tol) const {
    std::vector<float> gq(q.size()), gk(k.size()), gv(v.size());
    for (int r = 0; r < N(); ++r) {
      std::copy_n(&got[size_t(r) * ld()], qd(), &gq[size_t(r) * qd()]);
      std::copy_n(&got[size_t(r) * ld() + qd()], kvd(), &gk[size_t(r) * kvd()]);
      std::copy_n(&got[size_t(r) * ld() + qd() + kvd()], kvd(), &gv[size_t(r) * kvd()]);
    }
    EXPECT_LT(norm_relative(dq, gq), tol) << "dq";
    EXPECT_LT(norm_relative(dk, gk), tol) << "dk";
    EXPECT_LT(norm_relative(dv, gv), tol) << "dv";
  }
};

}  // namespace cohort::models::testing
