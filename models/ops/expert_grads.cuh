// CUDA experts' weight gradients (contract and CPU reference:
// expert_grads.h): one launch for every expert, bf16 tensor cores into the
// fp32 gradients.
//
// A block of 8 warps owns a 128 x 128 tile of one expert's dw [O, I] and
// walks the expert's rows 32 at a time. The MMA's M is O, its N is I and its
// K the rows: g [rows, O] gives A and x [rows, I] gives B, both stored with
// the rows (K) outermost, so ldmatrix's transposing form turns a row-major
// stage into the fragments. A stage is the 32 rows' 128 columns of each
// operand, 256 bytes a row in shared memory with 16-byte piece c of row r at
// c ^ (r mod 8): the eight rows one ldmatrix reads hit eight bank groups.
// Three stages are in flight through cp.async; rows past the expert's last
// and columns past O or I load as zeros. Each warp holds a 64 x 32 part of
// the tile (4 x 4 MMA tiles) in fp32 and adds it into dw once, at the end.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/expert_grads.h"

namespace cohort::models::cuda {

namespace expert_grads {

constexpr int kTile = 128;   // O and I of a block's tile
constexpr int kRows = 32;    // rows a stage
constexpr int kStages = 3;
constexpr int kPieces = kTile / 8;  // 16-byte pieces of a stage row
constexpr int kBlockThreads = 256;  // 8 warps: 2 along O (64 each) by 4 along I (32 each)

// Shared-memory byte offset of piece c of row r of operand m in stage s.
__device__ __forceinline__ uint32_t piece_offset(int s, int m, int r, int c) {
  return static_cast<uint32_t>((((s * 2 + m) * kRows + r) * kPieces + (c ^ (r & 7))) * 16);
}

}  // namespace expert_grads

__global__ void __launch_bounds__(expert_grads::kBlockThreads, 2)
    expert_weight_grads_kernel(float* dw, size_t expert_stride, const Bf16Bits* g, const Bf16Bits* x,
                               const int32_t* offsets, int O, int I, int tiles_i) {
  using namespace expert_grads;
  __shared__ __align__(128) uint4 stages[kStages * 2 * kRows * kPieces];
  const int e = static_cast<int>(blockIdx.y);
  const int first = offsets[e], last = offsets[e + 1];
  if (first >= last) return;
  const int o0 = static_cast<int>(blockIdx.x) / tiles_i * kTile, i0 = static_cast<int>(blockIdx.x) % tiles_i * kTile;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const uint32_t base = shared_address(stages);

  // Stage s <- rows [r0, r0 + 32): 2 operands x 32 rows x 16 pieces, 4 a thread.
  auto load = [&](int s, int r0) {
#pragma unroll
    for (int j = 0; j < 2 * kRows * kPieces / kBlockThreads; ++j) {
      const int p = static_cast<int>(threadIdx.x) + j * kBlockThreads;
      const int m = p / (kRows * kPieces), r = p / kPieces % kRows, c = p % kPieces;
      const int row = r0 + r;
      const int col = (m == 0 ? o0 : i0) + 8 * c, width = m == 0 ? O : I;
      const bool valid = row < last && col < width;
      const Bf16Bits* src = m == 0 ? g : x;
      if (valid) src += static_cast<size_t>(row) * width + col;
      cp_async16(base + piece_offset(s, m, r, c), src, valid);
    }
  };

  const int chunks = (last - first + kRows - 1) / kRows;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, first + s * kRows);
    cp_async_commit();
  }
  const int wo = warp / 4 * 64, wi = warp % 4 * 32;  // this warp's part of the tile
  const int mat = lane / 8, j = lane % 8;            // ldmatrix: this lane's matrix and row
  float acc[4][4][4] = {};
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // the chunk's stage is complete; the stage refilled below is read by none
    const int next = chunk + kStages - 1;
    if (next < chunks) load(next % kStages, first + next * kRows);
    cp_async_commit();
    const int s = chunk % kStages;
#pragma unroll
    for (int k0 = 0; k0 < kRows; k0 += 16) {
      // A (16 o x 16 rows) per M tile: matrices (o 0-7, k 0-7), (o 8-15, k 0-7),
      // (o 0-7, k 8-15), (o 8-15, k 8-15). B (16 rows x 8 i) per N tile pair:
      // (k 0-7, i 0-7), (k 8-15, i 0-7), (k 0-7, i 8-15), (k 8-15, i 8-15).
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const int r = k0 + j + (mat >> 1) * 8, c = (wo + mt * 16) / 8 + (mat & 1);
        ldmatrix_x4_trans(a[mt], base + piece_offset(s, 0, r, c));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int r = k0 + j + (mat & 1) * 8, c = (wi + np * 16) / 8 + (mat >> 1);
        uint32_t q[4];
        ldmatrix_x4_trans(q, base + piece_offset(s, 1, r, c));
        b[2 * np][0] = q[0], b[2 * np][1] = q[1], b[2 * np + 1][0] = q[2], b[2 * np + 1][1] = q[3];
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma(acc[mt][nt], a[mt], b[nt]);
      }
    }
  }
  cp_async_wait<0>();

  // acc[mt][nt]: rows o (g, g + 8) of M tile mt, columns i (2t, 2t + 1) of N tile nt.
  float* d = dw + static_cast<size_t>(e) * expert_stride;
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int o = o0 + wo + mt * 16 + gq + 8 * half;
      if (o >= O) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int i = i0 + wi + nt * 8 + 2 * t;
        if (i >= I) continue;
        float2* p = reinterpret_cast<float2*>(d + static_cast<size_t>(o) * I + i);
        float2 v = *p;
        v.x += acc[mt][nt][2 * half], v.y += acc[mt][nt][2 * half + 1];
        *p = v;
      }
    }
  }
}

bool expert_weight_grads_supported(int O, int I) { return O > 0 && I > 0 && O % 8 == 0 && I % 8 == 0; }

void expert_weight_grads_bf16(float* dw, size_t expert_stride, const Bf16Bits* g, const Bf16Bits* x,
                              const int32_t* offsets, int E, int O, int I, CUstream_st* stream) {
  using namespace expert_grads;
  COHORT_CHECK(expert_weight_grads_supported(O, I));
  if (E <= 0) return;
  const int tiles_o = (O + kTile - 1) / kTile, tiles_i = (I + kTile - 1) / kTile;
  expert_weight_grads_kernel<<<dim3(tiles_o * tiles_i, E), kBlockThreads, 0, stream>>>(dw, expert_stride, g, x, offsets,
                                                                                  O, I, tiles_i);
  COHORT_CUDA_CHECK_FATAL(cudaGetLastError());
}

}  // namespace cohort::models::cuda
