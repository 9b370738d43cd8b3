// Fused causal attention for training, flash-style (CPU reference and the
// contract: attention.h). No T x T matrix exists in memory: scores live in
// registers one 64-key tile at a time, with the running max and sum of an
// online softmax; forward saves only each query's log-sum-exp.
//
// Tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation): q, k,
// v, dy are fp32 (the op-by-op path: rounded to bf16 as they are staged in
// shared memory, as the GEMM path rounds its operands) or bf16 (the fused
// training blocks, models/cuda/train_blocks.cu) in global memory, each
// matrix with its own row stride; softmax, the
// log-sum-exp and every accumulator stay fp32. Probabilities are rounded to
// bf16 only as operands of the P·V and gradient products.
//
// Work split (head_dim D = 64 or 128; any T):
//   forward   block = (64 queries, head, batch), 4 warps x 16 query rows,
//             looping over the key tiles up to the diagonal.
//   dK, dV    block = (64 keys, KV head, batch), 4 warps x 16 keys, looping
//             over every query head of the group and every 32-query tile at
//             or after the keys: dV += P^T dO, dK += scale dS^T Q, written
//             once per block (+=), so no atomics.
//   dQ        block = (64 queries, head, batch), recomputing P and dP over
//             the key tiles: dQ += scale dS K. Recomputation costs two extra
//             products per tile, and buys a backward with no atomics and no
//             dQ accumulation buffer.
//   dsum      rowsum(dO * O) per query, the softmax-backward term, first.
// Tiles are staged row-major ([row][d], rows padded by 8 bf16 so that the
// eight 16-byte rows one ldmatrix reads fall in distinct banks) and read
// into fragments with ldmatrix, transposing (.trans) where a product needs
// the tile as [d][row].
#pragma once

#include "models/ops/flash_tiles.cuh"

namespace cohort::models::cuda {
namespace flash {

// ---- forward ---------------------------------------------------------------

// K and V tiles are double-buffered: tile kt + 1 is in flight while tile kt
// is multiplied.
template <int D>
struct Forward {
  static constexpr int kRows = 64, kKeys = 64, kLd = D + 8;
  static constexpr size_t kShared = (size_t(kRows) + 4 * size_t(kKeys)) * kLd * sizeof(bf16);
};

template <int D, typename In, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_kernel(Out* y, float* lse, const In* q, const In* k, const In* v, Shape sh) {
  using F = Forward<D>;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sQ = reinterpret_cast<bf16*>(shared);
  bf16* sKV = sQ + F::kRows * F::kLd;  // [buffer][K, V][kKeys][kLd]
  const int T = sh.T, ldq = sh.ldq, ldk = sh.ldk;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows of keys first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (sh.heads / sh.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = qt * F::kRows;
  const In* qb = q + static_cast<size_t>(b) * T * ldq + h * D;
  const In* kb = k + static_cast<size_t>(b) * T * ldk + kvh * D;
  const In* vb = v + static_cast<size_t>(b) * T * ldk + kvh * D;
  constexpr int kTile = F::kKeys * F::kLd;
  stage_async<D>(sQ, F::kLd, qb, ldq, q0, F::kRows, T);
  stage_async<D>(sKV, F::kLd, kb, ldk, 0, F::kKeys, T);
  stage_async<D>(sKV + kTile, F::kLd, vb, ldk, 0, F::kKeys, T);
  cp_async_commit();
  uint32_t qf[D / 16][4];

  const float scale2 = sh.scale * kLog2e;
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int last = min(q0 + F::kRows - 1, T - 1) / F::kKeys;
  for (int kt = 0; kt <= last; ++kt) {
    const int key0 = kt * F::kKeys;
    bf16* sK = sKV + (kt & 1) * 2 * kTile;
    bf16* sV = sK + kTile;
    if (kt < last) {  // the next tile into the other buffer, freed by the last barrier
      bf16* nK = sKV + ((kt + 1) & 1) * 2 * kTile;
      stage_async<D>(nK, F::kLd, kb, ldk, key0 + F::kKeys, F::kKeys, T);
      stage_async<D>(nK + kTile, F::kLd, vb, ldk, key0 + F::kKeys, F::kKeys, T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], sQ, F::kLd, warp * 16, kk * 16);
    }
    // Every row has at least one key in every tile it visits (key0 <= row).
    attend_tile<D, F::kKeys, false>(o, m, l, qf, sK, sV, F::kLd, key0, row,
                                    key0 + F::kKeys - 1 > q0 + warp * 16, scale2);
    __syncthreads();  // this buffer is the next iteration's prefetch target
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (row[r] >= T) continue;
    const float inv = 1.0f / l[r];
    Out* yr = y + (static_cast<size_t>(b) * T + row[r]) * sh.ldo + h * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      store_pair(yr + nd * 8 + 2 * t, o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv, false);
    }
    if (t == 0) lse[(static_cast<size_t>(b) * sh.heads + h) * T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// ---- backward --------------------------------------------------------------

// dsum[b, h, i] = sum_d dy[i, h, d] * y[i, h, d]; one warp per (token, head).
template <int D, typename In>
__global__ void dsum_kernel(float* dsum, const In* dy, const In* y, int B, Shape sh) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  const int rows = B * sh.T * sh.heads;
  if (warp >= rows) return;
  const int h = warp % sh.heads, token = warp / sh.heads;
  const In* a = dy + static_cast<size_t>(token) * sh.ldo + h * D;
  const In* c = y + static_cast<size_t>(token) * sh.ldo + h * D;
  float acc = 0.f;
  for (int d = 2 * lane; d < D; d += 64) {
    const float2 x = load_pair(a + d), z = load_pair(c + d);
    acc += x.x * z.x + x.y * z.y;
  }
  acc = warp_sum(acc);
  const int b = token / sh.T, i = token % sh.T;
  if (lane == 0) dsum[(static_cast<size_t>(b) * sh.heads + h) * sh.T + i] = acc;
}

// Q, dO, lse and dsum tiles are double-buffered.
template <int D>
struct BackwardKv {
  static constexpr int kKeys = 64, kRows = 32, kLd = D + 8;
  static constexpr size_t kShared =
      (2 * size_t(kKeys) + 4 * size_t(kRows)) * kLd * sizeof(bf16) + 4 * kRows * sizeof(float);
};

template <int D, typename In, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_kv_kernel(Out* dk, Out* dv, const In* dy, const In* q, const In* k, const In* v,
                       const float* lse, const float* dsum, Shape sh) {
  using F = BackwardKv<D>;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sK = reinterpret_cast<bf16*>(shared);
  bf16* sV = sK + F::kKeys * F::kLd;
  bf16* sQdO = sV + F::kKeys * F::kLd;  // [buffer][Q, dO][kRows][kLd]
  float* sLDs = reinterpret_cast<float*>(sQdO + 4 * F::kRows * F::kLd);  // [buffer][lse, dsum][kRows]
  constexpr int kTile = F::kRows * F::kLd;
  const int T = sh.T, ldq = sh.ldq, ldk = sh.ldk, group = sh.heads / sh.kv_heads;
  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int key0 = kt * F::kKeys;
  const float scale2 = sh.scale * kLog2e;
  stage_async<D>(sK, F::kLd, k + static_cast<size_t>(b) * T * ldk + kvh * D, ldk, key0, F::kKeys, T);
  stage_async<D>(sV, F::kLd, v + static_cast<size_t>(b) * T * ldk + kvh * D, ldk, key0, F::kKeys, T);
  const int key[2] = {key0 + warp * 16 + g, key0 + warp * 16 + g + 8};
  float dK[D / 8][4] = {}, dV[D / 8][4] = {};
  // One iteration per (query head of the group, 32-query tile at or after
  // the keys); iteration it + 1's tiles are in flight while it computes.
  const int tiles = (T - key0 + F::kRows - 1) / F::kRows, iterations = group * tiles;
  auto issue = [&](int it) {
    const int h = kvh * group + it / tiles, q0 = key0 + (it % tiles) * F::kRows;
    bf16* nQ = sQdO + (it & 1) * 2 * kTile;
    float* nL = sLDs + (it & 1) * 2 * F::kRows;
    stage_async<D>(nQ, F::kLd, q + static_cast<size_t>(b) * T * ldq + h * D, ldq, q0, F::kRows, T);
    stage_async<D>(nQ + kTile, F::kLd, dy + static_cast<size_t>(b) * T * sh.ldo + h * D, sh.ldo, q0,
                   F::kRows, T);
    // Padding rows: lse +inf gives P = 0.
    stage_rows_async(nL, lse + (static_cast<size_t>(b) * sh.heads + h) * T, q0, F::kRows, T, INFINITY);
    stage_rows_async(nL + F::kRows, dsum + (static_cast<size_t>(b) * sh.heads + h) * T, q0, F::kRows,
                     T, 0.f);
  };
  issue(0);
  cp_async_commit();
  for (int it = 0; it < iterations; ++it) {
    {
      const int q0 = key0 + (it % tiles) * F::kRows;
      const bf16* sQ = sQdO + (it & 1) * 2 * kTile;
      const bf16* sdO = sQ + kTile;
      const float* sL = sLDs + (it & 1) * 2 * F::kRows;
      const float* sDs = sL + F::kRows;
      if (it + 1 < iterations) issue(it + 1);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      float st[F::kRows / 8][4] = {}, dpt[F::kRows / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[4], va[4];
        load_a(ka, sK, F::kLd, warp * 16, kk * 16);
        load_a(va, sV, F::kLd, warp * 16, kk * 16);
#pragma unroll
        for (int nt = 0; nt < F::kRows / 8; nt += 2) {
          uint32_t bq0[2], bq1[2], bo0[2], bo1[2];
          load_b2(bq0, bq1, sQ, F::kLd, nt * 8, kk * 16);
          load_b2(bo0, bo1, sdO, F::kLd, nt * 8, kk * 16);
          mma(st[nt], ka, bq0);   // S^T = K Q^T
          mma(st[nt + 1], ka, bq1);
          mma(dpt[nt], va, bo0);  // dP^T = V dO^T
          mma(dpt[nt + 1], va, bo1);
        }
      }
      const bool masked = q0 < key0 + F::kKeys;
#pragma unroll
      for (int nt = 0; nt < F::kRows / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = nt * 8 + 2 * t + (e & 1);
          float p = exp2f(st[nt][e] * scale2 - sL[qi] * kLog2e);
          if (masked && q0 + qi < key[e >> 1]) p = 0.f;
          st[nt][e] = p;                           // P^T
          dpt[nt][e] = p * (dpt[nt][e] - sDs[qi]);  // dS^T
        }
      }
#pragma unroll
      for (int kk = 0; kk < F::kRows / 16; ++kk) {
        uint32_t pa[4], sa[4];
        accum_to_a(pa, st[2 * kk], st[2 * kk + 1]);
        accum_to_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
        for (int nd = 0; nd < D / 8; nd += 2) {
          uint32_t bo0[2], bo1[2], bq0[2], bq1[2];
          load_b2_trans(bo0, bo1, sdO, F::kLd, nd * 8, kk * 16);
          load_b2_trans(bq0, bq1, sQ, F::kLd, nd * 8, kk * 16);
          mma(dV[nd], pa, bo0);  // dV += P^T dO
          mma(dV[nd + 1], pa, bo1);
          mma(dK[nd], sa, bq0);  // dK += dS^T Q
          mma(dK[nd + 1], sa, bq1);
        }
      }
      __syncthreads();  // this buffer is the prefetch target of iteration it + 2
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= T) continue;
    const size_t off = (static_cast<size_t>(b) * T + key[r]) * ldk + kvh * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      store_pair(dk + off + nd * 8 + 2 * t, dK[nd][2 * r] * sh.scale, dK[nd][2 * r + 1] * sh.scale, true);
      store_pair(dv + off + nd * 8 + 2 * t, dV[nd][2 * r], dV[nd][2 * r + 1], true);
    }
  }
}

// K and V tiles are double-buffered, as in the forward.
template <int D>
struct BackwardQ {
  static constexpr int kRows = 64, kKeys = 64, kLd = D + 8;
  static constexpr size_t kShared = (2 * size_t(kRows) + 4 * size_t(kKeys)) * kLd * sizeof(bf16);
};

template <int D, typename In, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    backward_q_kernel(Out* dq, const In* dy, const In* q, const In* k, const In* v,
                      const float* lse, const float* dsum, Shape sh) {
  using F = BackwardQ<D>;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sQ = reinterpret_cast<bf16*>(shared);
  bf16* sdO = sQ + F::kRows * F::kLd;
  bf16* sKV = sdO + F::kRows * F::kLd;  // [buffer][K, V][kKeys][kLd]
  constexpr int kTile = F::kKeys * F::kLd;
  const int T = sh.T, ldq = sh.ldq, ldk = sh.ldk;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (sh.heads / sh.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = qt * F::kRows;
  const float scale2 = sh.scale * kLog2e;
  const In* kb = k + static_cast<size_t>(b) * T * ldk + kvh * D;
  const In* vb = v + static_cast<size_t>(b) * T * ldk + kvh * D;
  stage_async<D>(sQ, F::kLd, q + static_cast<size_t>(b) * T * ldq + h * D, ldq, q0, F::kRows, T);
  stage_async<D>(sdO, F::kLd, dy + static_cast<size_t>(b) * T * sh.ldo + h * D, sh.ldo, q0, F::kRows, T);
  stage_async<D>(sKV, F::kLd, kb, ldk, 0, F::kKeys, T);
  stage_async<D>(sKV + kTile, F::kLd, vb, ldk, 0, F::kKeys, T);
  cp_async_commit();
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float L[2], Ds[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const size_t i = (static_cast<size_t>(b) * sh.heads + h) * T + row[r];
    L[r] = row[r] < T ? lse[i] * kLog2e : INFINITY;
    Ds[r] = row[r] < T ? dsum[i] : 0.f;
  }
  float dQ[D / 8][4] = {};
  const int last = min(q0 + F::kRows - 1, T - 1) / F::kKeys;
  for (int kt = 0; kt <= last; ++kt) {
    const int key0 = kt * F::kKeys;
    const bf16* sK = sKV + (kt & 1) * 2 * kTile;
    const bf16* sV = sK + kTile;
    if (kt < last) {
      bf16* nK = sKV + ((kt + 1) & 1) * 2 * kTile;
      stage_async<D>(nK, F::kLd, kb, ldk, key0 + F::kKeys, F::kKeys, T);
      stage_async<D>(nK + kTile, F::kLd, vb, ldk, key0 + F::kKeys, F::kKeys, T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float s[F::kKeys / 8][4] = {}, dp[F::kKeys / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[4], oa[4];
      load_a(qa, sQ, F::kLd, warp * 16, kk * 16);
      load_a(oa, sdO, F::kLd, warp * 16, kk * 16);
#pragma unroll
      for (int nt = 0; nt < F::kKeys / 8; nt += 2) {
        uint32_t bk0[2], bk1[2], bv0[2], bv1[2];
        load_b2(bk0, bk1, sK, F::kLd, nt * 8, kk * 16);
        load_b2(bv0, bv1, sV, F::kLd, nt * 8, kk * 16);
        mma(s[nt], qa, bk0);   // S = Q K^T
        mma(s[nt + 1], qa, bk1);
        mma(dp[nt], oa, bv0);  // dP = dO V^T
        mma(dp[nt + 1], oa, bv1);
      }
    }
    const bool masked = key0 + F::kKeys - 1 > q0 + warp * 16;
#pragma unroll
    for (int nt = 0; nt < F::kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = key0 + nt * 8 + 2 * t + (e & 1);
        float p = exp2f(s[nt][e] * scale2 - L[r]);
        if (masked && key > row[r]) p = 0.f;
        dp[nt][e] = p * (dp[nt][e] - Ds[r]);  // dS
      }
    }
#pragma unroll
    for (int kk = 0; kk < F::kKeys / 16; ++kk) {
      uint32_t sa[4];
      accum_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int nd = 0; nd < D / 8; nd += 2) {
        uint32_t bk0[2], bk1[2];
        load_b2_trans(bk0, bk1, sK, F::kLd, nd * 8, kk * 16);
        mma(dQ[nd], sa, bk0);  // dQ += dS K
        mma(dQ[nd + 1], sa, bk1);
      }
    }
    __syncthreads();  // this buffer is the next iteration's prefetch target
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T) continue;
    Out* dqr = dq + (static_cast<size_t>(b) * T + row[r]) * ldq + h * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      store_pair(dqr + nd * 8 + 2 * t, dQ[nd][2 * r] * sh.scale, dQ[nd][2 * r + 1] * sh.scale, true);
    }
  }
}

}  // namespace flash

// True when the fused kernels handle this head size.
inline bool flash_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

// Raises the kernels' dynamic shared-memory limits for one element-type
// pairing (In: q, k, v, dy, y; Out: y, dq, dk, dv); once per device.
template <typename In, typename Out>
cudaError_t flash_attention_prepare() {
  cudaError_t e = cudaSuccess;
  auto raise = [&](const void* fn, size_t bytes) {
    if (e == cudaSuccess) e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  };
  raise(reinterpret_cast<const void*>(flash::forward_kernel<64, In, Out>), flash::Forward<64>::kShared);
  raise(reinterpret_cast<const void*>(flash::forward_kernel<128, In, Out>), flash::Forward<128>::kShared);
  raise(reinterpret_cast<const void*>(flash::backward_kv_kernel<64, In, Out>), flash::BackwardKv<64>::kShared);
  raise(reinterpret_cast<const void*>(flash::backward_kv_kernel<128, In, Out>), flash::BackwardKv<128>::kShared);
  raise(reinterpret_cast<const void*>(flash::backward_q_kernel<64, In, Out>), flash::BackwardQ<64>::kShared);
  raise(reinterpret_cast<const void*>(flash::backward_q_kernel<128, In, Out>), flash::BackwardQ<128>::kShared);
  return e;
}

template <int D, typename In, typename Out>
void flash_forward_launch(cudaStream_t stream, Out* y, float* lse, const In* q, const In* k,
                          const In* v, int B, const flash::Shape& sh) {
  using F = flash::Forward<D>;
  const dim3 grid((sh.T + F::kRows - 1) / F::kRows, sh.heads, B);
  flash::forward_kernel<D, In, Out><<<grid, flash::kThreadsPerBlock, F::kShared, stream>>>(y, lse, q, k, v, sh);
}

// dsum: B * heads * T floats of scratch. fp32 outputs accumulate, bf16
// outputs are overwritten (store_pair).
template <int D, typename In, typename Out>
void flash_backward_launch(cudaStream_t stream, Out* dq, Out* dk, Out* dv, float* dsum,
                           const In* dy, const In* q, const In* k, const In* v, const In* y,
                           const float* lse, int B, const flash::Shape& sh) {
  const int rows = B * sh.T * sh.heads;
  flash::dsum_kernel<D, In><<<(rows + 7) / 8, 256, 0, stream>>>(dsum, dy, y, B, sh);
  using KV = flash::BackwardKv<D>;
  const dim3 kv_grid((sh.T + KV::kKeys - 1) / KV::kKeys, sh.kv_heads, B);
  flash::backward_kv_kernel<D, In, Out><<<kv_grid, flash::kThreadsPerBlock, KV::kShared, stream>>>(
      dk, dv, dy, q, k, v, lse, dsum, sh);
  using Q = flash::BackwardQ<D>;
  const dim3 q_grid((sh.T + Q::kRows - 1) / Q::kRows, sh.heads, B);
  flash::backward_q_kernel<D, In, Out><<<q_grid, flash::kThreadsPerBlock, Q::kShared, stream>>>(
      dq, dy, q, k, v, lse, dsum, sh);
}

}  // namespace cohort::models::cuda
