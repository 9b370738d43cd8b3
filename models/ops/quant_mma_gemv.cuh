// Quantized decode projections of 1 to 8 rows on the tensor cores, for the
// formats decode is served in: 4-bit integer codes (cohort's int4, GPTQ,
// AWQ) with groups of 128 columns or more, and e4m3 codes (FP8 checkpoints,
// cohort's fp8) with groups of 64 or more. The contract and the reference
// are quant_gemv.h's; quant_gemv() takes this path where it applies.
//
// Why not the CUDA-core GEMV (quant_gemv.cuh): at 4 bits a weight, the
// GEMV's decode (an integer to float per code, a subtract, an fp32 FMA, and
// x widened per row) costs about five instructions a weight, which at batch
// 1 makes an 8B model's layer instruction-bound at several times its HBM
// time. Here a code costs about one instruction:
//
//  * The weight tile is the MMA's A operand (16 output rows a block: lane
//    (g, t) holds rows g and g + 8), x its B operand (x row g in lane (g, t);
//    rows past n repeat row n - 1 and their sums are dropped). A lane loads
//    16 bytes of codes of each of its two rows: 32 columns at 4 bits, 16 at
//    8, and the quad of lanes t = 0..3 covers one "step" of 128 or 64
//    columns, inside one group.
//  * 4-bit codes become bf16 pairs with one lop3 each: 0x4300 | c is the
//    bf16 128 + c exactly, for the nibbles at bits 4i and 4i + 16 of a word,
//    so the pairs are columns (j, j + 4); a subtract of 136 leaves c - 8
//    exactly. x's bf16 pairs are permuted the same way (prmt), so the MMA
//    computes the plain dot product Σ (c - 8) x over the step. The zero
//    point enters once per step: s · (Σ (c - 8) x - (z - 8) Σ x), with Σ x
//    from one more MMA whose A is all ones (none where every zero is 8:
//    cohort's own int4, "centred"). Every product is exact in fp32.
//  * e4m3 pairs convert with Hopper's cvt to f16x2 (exact), then to bf16 by
//    moving the exponent and mantissa down 3 bits: each value times 2^-112,
//    a power of two the group's scale takes back. All such values are
//    normal bf16 numbers; the MMA's products and sums are exact scalings of
//    the fp32 ones.
//  * The steps of a row are spread over the block's warps (of W, warp w
//    takes steps w, w + W, ...), a few at a time in flight in registers
//    (QuantMmaShape); the warps' sums meet in shared memory in warp order
//    (deterministic). Streaming the codes through a cp.async ring in shared
//    memory instead was slower end to end: its shared memory kept the next
//    kernel's blocks from starting early beside this one.
#pragma once

#include <cuda_fp8.h>

#include "models/cuda/common.cuh"
#include "models/ops/quant_gemv.h"
#include "models/ops/skinny_gemm.cuh"

namespace cohort::models::cuda {

// Warps a block (each a share of K) and steps each has in flight, per code
// kind, where a projection has at most two blocks an SM of tiles (o, down
// at 8B), as measured on an H100 (bench/RESULTS.md): e4m3's steps hold half
// the columns of 4-bit ones and decode in fewer instructions, so more warps
// with fewer steps each keep more of HBM busy.
template <quant::CodeKind K>
struct QuantMmaShape {
  static constexpr int kWarps = K == quant::CodeKind::kUint4 ? 8 : 16;
  static constexpr int kSteps = K == quant::CodeKind::kUint4 ? 4 : 2;
};

// Where a projection has more than two blocks an SM of tiles (q|k|v,
// gate|up at 8B), three blocks of 8 warps with 2 steps each kept HBM
// busiest, for centred 4-bit codes (every zero 8, cohort's symmetric int4:
// no Σ x MMA and no zero loads leave the registers for it) and for e4m3
// (H100, bench/RESULTS.md: the 8B layer's four int4 projections 62.8 ->
// 53.8 us; e4m3's q|k|v 15.4 -> 12.8 us, gate|up 55.7 -> 43.0).
inline bool quant_mma_three_blocks(int tiles) { return tiles > 2 * device_multiprocessors(); }

// 16 bytes of codes, asking L2 for the whole 256-byte span: the next steps
// of a row's codes, which the block's other warps read next (1 to 3% off
// each projection of the 8B layer, H100).
__device__ __forceinline__ uint4 load_codes(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Columns of one step: 16 bytes of codes in each of a quad's 4 lanes.
template <quant::CodeKind K>
constexpr int mma_step_columns() {
  return K == quant::CodeKind::kUint4 ? 128 : 64;
}

bool quant_mma_supported(const RowPackedView& w, int n) {
  int step = 0;
  if (w.kind == quant::CodeKind::kUint4) step = 128;
  if (w.kind == quant::CodeKind::kE4m3) step = 64;
  return step > 0 && n >= 1 && n <= kQuantGemvMaxRows && w.cols % step == 0 && w.group % step == 0 &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0;
}

// (bf16(128 + nibble at bit s), bf16(128 + nibble at bit s + 16)) of q >> s.
__device__ __forceinline__ uint32_t nibble_pair_bf16(uint32_t q) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(q), "n"(0x000f000f), "n"(0x43004300));
  return r;
}

// c - 8 for both halves of a nibble_pair_bf16 (exact: small integers).
__device__ __forceinline__ uint32_t minus_136(uint32_t pair) {
  const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&pair),
                                   __nv_bfloat162(__float2bfloat16(136.0f), __float2bfloat16(136.0f)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two e4m3 bytes (the low 16 bits) as bf16 pairs, each value times 2^-112.
__device__ __forceinline__ uint32_t e4m3_pair_bf16(uint32_t bits) {
  const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  const uint32_t h = static_cast<uint32_t>(pair.x) | (static_cast<uint32_t>(pair.y) << 16);
  return ((h >> 3) & 0x0fff0fffu) | (h & 0x80008000u);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

struct QuantMmaArgs {
  float* y;           // kStore / kAccumulate: [n, out] fp32
  Bf16Bits* h;        // kSwiglu: [n, out] bf16
  const Bf16Bits* x;  // [n, in]
  int n, out;         // out: output features (SwiGLU: I, the weight has 2 I rows)
  FoldedNorm norm;    // chunks of kQuantNormChunk (quant_gemv.h)
};

// acc (lane (g, t): rows g and g + 8 of the tile, x rows 2t and 2t + 1) +=
// one step's sums of the two code rows `lo` and `hi` at step `step`.
template <quant::CodeKind K, bool kCentred = false>
__device__ __forceinline__ void quant_mma_step(float (&acc)[4], const uint4& lo, const uint4& hi, float s_lo,
                                               float s_hi, float z_lo, float z_hi, const Bf16Bits* x_row,
                                               int column) {
  // Two chains of MMAs a sum, so each waits on half as many.
  float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dot2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (K == quant::CodeKind::kUint4) {
    float sum_x[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum_x2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    [[maybe_unused]] const uint32_t ones[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // word i: columns 8i .. 8i + 7 of the lane's 32
      const uint4 xv = *reinterpret_cast<const uint4*>(x_row + column + 8 * i);
      const uint32_t ql = word_of(lo, i), qh = word_of(hi, i);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // columns (2 half, 2 half + 4) and (2 half + 1, 2 half + 5)
        const uint32_t a[4] = {minus_136(nibble_pair_bf16(ql >> (8 * half))),
                               minus_136(nibble_pair_bf16(qh >> (8 * half))),
                               minus_136(nibble_pair_bf16(ql >> (8 * half + 4))),
                               minus_136(nibble_pair_bf16(qh >> (8 * half + 4)))};
        const uint32_t x_lo = half == 0 ? xv.x : xv.y, x_hi = half == 0 ? xv.z : xv.w;
        const uint32_t b[2] = {__byte_perm(x_lo, x_hi, 0x5410), __byte_perm(x_lo, x_hi, 0x7632)};
        mma(half ? dot2 : dot, a, b);
        if constexpr (!kCentred) mma(half ? sum_x2 : sum_x, ones, b);
      }
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) dot[v] += dot2[v], sum_x[v] += sum_x2[v];
    if constexpr (kCentred) {  // z = 8: the Σ x term is zero
      acc[0] = fmaf(s_lo, dot[0], acc[0]);
      acc[1] = fmaf(s_lo, dot[1], acc[1]);
      acc[2] = fmaf(s_hi, dot[2], acc[2]);
      acc[3] = fmaf(s_hi, dot[3], acc[3]);
    } else {
      acc[0] = fmaf(s_lo, dot[0] - (z_lo - 8.0f) * sum_x[0], acc[0]);
      acc[1] = fmaf(s_lo, dot[1] - (z_lo - 8.0f) * sum_x[1], acc[1]);
      acc[2] = fmaf(s_hi, dot[2] - (z_hi - 8.0f) * sum_x[2], acc[2]);
      acc[3] = fmaf(s_hi, dot[3] - (z_hi - 8.0f) * sum_x[3], acc[3]);
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // 8 columns of x, two words of codes
      const uint4 xv = *reinterpret_cast<const uint4*>(x_row + column + 8 * half);
#pragma unroll
      for (int j = 0; j < 2; ++j) {  // word 2 half + j: columns 4 (2 half + j) .. + 3
        const uint32_t ql = word_of(lo, 2 * half + j), qh = word_of(hi, 2 * half + j);
        const uint32_t a[4] = {e4m3_pair_bf16(ql), e4m3_pair_bf16(qh), e4m3_pair_bf16(ql >> 16),
                               e4m3_pair_bf16(qh >> 16)};
        const uint32_t b[2] = {j == 0 ? xv.x : xv.z, j == 0 ? xv.y : xv.w};
        mma(j ? dot2 : dot, a, b);
      }
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) dot[v] += dot2[v];
    acc[0] = fmaf(dot[0] * 0x1p112f, s_lo, acc[0]);
    acc[1] = fmaf(dot[1] * 0x1p112f, s_lo, acc[1]);
    acc[2] = fmaf(dot[2] * 0x1p112f, s_hi, acc[2]);
    acc[3] = fmaf(dot[3] * 0x1p112f, s_hi, acc[3]);
  }
}

// One 16-row tile of the output (SwiGLU: 8 gate rows over their 8 up rows)
// a block, over all of K. kWarps warps, S steps each in flight, at least
// kMinBlocks blocks an SM (the registers' bound).
template <quant::CodeKind K, SkinnyEpilogue kEpilogue, bool kCentred, int kWarps, int S, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) quant_mma_kernel(QuantMmaArgs a, RowPackedView w) {
  constexpr int kStep = mma_step_columns<K>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const bool swiglu = kEpilogue == SkinnyEpilogue::kSwiglu;
  const int f_lo = swiglu ? blockIdx.x * 8 + g : blockIdx.x * 16 + g;
  const int f_hi = swiglu ? f_lo : f_lo + 8;
  const bool lo_ok = f_lo < a.out, hi_ok = f_hi < a.out;
  const size_t r_lo = lo_ok ? f_lo : 0, r_hi = hi_ok ? (swiglu ? a.out + f_hi : f_hi) : 0;
  const int steps = w.cols / kStep, groups = (w.cols + w.group - 1) / w.group;
  const size_t row_bytes = static_cast<size_t>(w.cols) / (K == quant::CodeKind::kUint4 ? 2 : 1);
  const uint8_t* codes_lo = w.codes + r_lo * row_bytes + 16 * t;
  const uint8_t* codes_hi = w.codes + r_hi * row_bytes + 16 * t;
  const Bf16Bits* x_row = a.x + static_cast<size_t>(g < a.n ? g : a.n - 1) * w.cols + t * (kStep / 4);

  uint4 lo[S], hi[S];
  float s_lo[S], s_hi[S], z_lo[S], z_hi[S];
  // Slot u of the S in flight: step `step`'s codes, scales and zeros.
  auto load = [&](int u, int step) {
    lo[u] = load_codes(codes_lo + static_cast<size_t>(step) * 64);
    hi[u] = load_codes(codes_hi + static_cast<size_t>(step) * 64);
    const int group = step * kStep / w.group;
    s_lo[u] = __ldg(w.scales + r_lo * groups + group), s_hi[u] = __ldg(w.scales + r_hi * groups + group);
    if constexpr (K == quant::CodeKind::kUint4 && !kCentred) {
      z_lo[u] = w.zeros ? __ldg(w.zeros + r_lo * groups + group) : 0.0f;
      z_hi[u] = w.zeros ? __ldg(w.zeros + r_hi * groups + group) : 0.0f;
    } else {
      z_lo[u] = z_hi[u] = 0.0f;
    }
  };
  // The codes are the step's constants: the first ones load before the wait
  // on the predecessor (programmatic dependent launch), x after it.
#pragma unroll
  for (int u = 0; u < S; ++u) {
    if (warp + kWarps * u < steps) load(u, warp + kWarps * u);
  }
  begin_dependent();
  // A folded norm's consumer: warp r takes row r's scale from its sums (each
  // lane's chunks in order, then the lanes' fixed tree), while the first
  // codes are still arriving.
  __shared__ float row_scale[kQuantGemvMaxRows];
  if (a.norm.in_sumsq != nullptr && warp < a.n) {
    const int chunks = w.cols / kQuantNormChunk;
    const float* row_sums = a.norm.in_sumsq + static_cast<size_t>(warp) * chunks;
    float ss = 0.0f;
    for (int c = lane; c < chunks; c += 32) ss += row_sums[c];
    ss = warp_sum(ss);
    if (lane == 0) row_scale[warp] = rsqrtf(ss / static_cast<float>(w.cols) + a.norm.eps);
  }
  // Each slot, once its step is summed, loads the step S slots on: the
  // warp keeps S steps in flight all along a row rather than waiting out a
  // whole round of S at a time (the rows of o and down are 1 to 6 rounds
  // long). The sums keep the warp's step order.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int first = warp; first < steps; first += kWarps * S) {
#pragma unroll
    for (int u = 0; u < S; ++u) {
      const int step = first + kWarps * u;
      if (step < steps) {
        quant_mma_step<K, kCentred>(acc, lo[u], hi[u], s_lo[u], s_hi[u], z_lo[u], z_hi[u], x_row, step * kStep);
        if (step + kWarps * S < steps) load(u, step + kWarps * S);
      }
    }
  }
  // The warps' sums, [warp][value][lane], added in warp order by warp 0.
  __shared__ float sums[kWarps][4][32];
#pragma unroll
  for (int v = 0; v < 4; ++v) sums[warp][v][lane] = acc[v];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    acc[v] = 0.0f;
    for (int q = 0; q < kWarps; ++q) acc[v] += sums[q][v][lane];
  }
  if (a.norm.in_sumsq != nullptr) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float scale = 2 * t + e < a.n ? row_scale[2 * t + e] : 0.0f;
      acc[e] *= scale, acc[2 + e] *= scale;
    }
  }
  if (kEpilogue == SkinnyEpilogue::kAccumulate && a.norm.out_x != nullptr) {
    // A producer (its outputs whole chunks, so lo_ok and hi_ok): the new
    // residual, the next norm's input bf16(x * w), and the sum of squares
    // of this tile's 16 outputs a row, over the lanes of one t in a fixed
    // order.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * t + e;
      float ss = 0.0f;
      if (r < a.n) {
        float* row = a.y + static_cast<size_t>(r) * a.out;
        const float x_lo = row[f_lo] + acc[e], x_hi = row[f_hi] + acc[2 + e];
        row[f_lo] = x_lo, row[f_hi] = x_hi;
        Bf16Bits* out_x = a.norm.out_x + static_cast<size_t>(r) * a.out;
        out_x[f_lo] = to_bf16_bits(x_lo * __ldg(a.norm.out_weight + f_lo));
        out_x[f_hi] = to_bf16_bits(x_hi * __ldg(a.norm.out_weight + f_hi));
        ss = x_lo * x_lo + x_hi * x_hi;
      }
      for (int o = 4; o < 32; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (g == 0 && r < a.n) a.norm.out_sumsq[static_cast<size_t>(r) * (a.out / kQuantNormChunk) + blockIdx.x] = ss;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {  // x row 2t + e: acc[e] (row f_lo), acc[2 + e] (row f_hi)
    const int r = 2 * t + e;
    if (r >= a.n) continue;
    if constexpr (kEpilogue == SkinnyEpilogue::kSwiglu) {
      const float gate = acc[e], up = acc[2 + e];
      if (lo_ok) a.h[static_cast<size_t>(r) * a.out + f_lo] = to_bf16_bits(gate / (1.0f + __expf(-gate)) * up);
    } else {
      float* row = a.y + static_cast<size_t>(r) * a.out;
      if constexpr (kEpilogue == SkinnyEpilogue::kAccumulate) {
        if (lo_ok) row[f_lo] += acc[e];
        if (hi_ok) row[f_hi] += acc[2 + e];
      } else {
        if (lo_ok) row[f_lo] = acc[e];
        if (hi_ok) row[f_hi] = acc[2 + e];
      }
    }
  }
}

template <quant::CodeKind K, SkinnyEpilogue kEpilogue, bool kCentred, int kWarps, int S, int kMinBlocks>
void launch_quant_mma_shape(const QuantMmaArgs& args, const RowPackedView& w, int tiles, CUstream_st* stream) {
  launch_dependent(quant_mma_kernel<K, kEpilogue, kCentred, kWarps, S, kMinBlocks>, static_cast<unsigned>(tiles),
                   32 * kWarps, 0, stream, args, w);
}

// A code kind's block shape by the projection's tiles (quant_mma_three_blocks);
// the general 4-bit form (GPTQ, AWQ: their own zeros) keeps the few-tiles
// shape, its registers holding the zeros.
template <quant::CodeKind K, SkinnyEpilogue kEpilogue, bool kCentred>
void launch_quant_mma_kind(const QuantMmaArgs& args, const RowPackedView& w, int tiles, CUstream_st* stream) {
  using Shape = QuantMmaShape<K>;
  if constexpr (K == quant::CodeKind::kE4m3 || kCentred) {
    if (quant_mma_three_blocks(tiles)) {
      return launch_quant_mma_shape<K, kEpilogue, kCentred, 8, 2, 3>(args, w, tiles, stream);
    }
  }
  launch_quant_mma_shape<K, kEpilogue, kCentred, Shape::kWarps, Shape::kSteps, 1>(args, w, tiles, stream);
}

template <SkinnyEpilogue kEpilogue>
void launch_quant_mma(float* y, Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n, int out,
                      CUstream_st* stream, const FoldedNorm& norm = {}) {
  const QuantMmaArgs args{y, h, x, n, out, norm};
  const int tiles = kEpilogue == SkinnyEpilogue::kSwiglu ? (out + 7) / 8 : (out + 15) / 16;
  if (w.kind == quant::CodeKind::kUint4 && w.centred) {
    launch_quant_mma_kind<quant::CodeKind::kUint4, kEpilogue, true>(args, w, tiles, stream);
  } else if (w.kind == quant::CodeKind::kUint4) {
    launch_quant_mma_kind<quant::CodeKind::kUint4, kEpilogue, false>(args, w, tiles, stream);
  } else {
    launch_quant_mma_kind<quant::CodeKind::kE4m3, kEpilogue, false>(args, w, tiles, stream);
  }
}

}  // namespace cohort::models::cuda
