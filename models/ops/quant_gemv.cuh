// CUDA quantized decode projections (contract and CPU reference:
// quant_gemv.h). The bf16 GEMV's shape (gemv.cuh): a warp per output row
// (two for SwiGLU: a gate row and its up row), four warps a block, each lane
// streaming 16-byte pieces of codes along the row, U pieces a row in
// flight, partial sums meeting by shuffles at the end.
//
// A piece is 32 columns of 4-bit codes or 16 of 8-bit ones, inside one
// group (pack_rows makes groups whole pieces), so the lane reads one scale
// and zero for it, sums (value - zero) · x over the piece in fp32, and
// scales that sum once. Integer codes become floats by the exponent trick:
// 0x4B000000 | c is the float 2^23 + c, and subtracting 2^23 + zero leaves
// c - zero exactly, two instructions a code. e4m3 pairs convert with
// Hopper's cvt to f16x2; NF4 codes index its table of levels.
#pragma once

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "base/env_knobs.h"
#include "models/cuda/common.cuh"
#include "models/ops/gemv.cuh"
#include "models/ops/quant_gemv.h"
#include "models/ops/quant_mma_gemv.cuh"
#include "models/ops/skinny_gemm.cuh"

namespace cohort::models::cuda {

constexpr int kQuantGemvWarps = 4;
constexpr int kQuantGemvUnroll = 4;

template <quant::CodeKind K>
constexpr int piece_columns() {
  return K == quant::CodeKind::kUint4 || K == quant::CodeKind::kNf4 ? 32 : 16;
}

// NF4's 16 levels (models/quant/nf4.h). A piece's codes index them all at
// once from constant memory; the lookups serialise where lanes differ,
// which the expansion kernels (the QLoRA base) can afford.
__constant__ float kNf4LevelTable[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};

// v[j] = value(code j of the piece) - zero.
template <quant::CodeKind K>
__device__ __forceinline__ void decode_piece(const uint4& piece, float zero, float (&v)[piece_columns<K>()]) {
  const uint32_t words[4] = {piece.x, piece.y, piece.z, piece.w};
  if constexpr (K == quant::CodeKind::kNf4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * i + j] = kNf4LevelTable[(words[i] >> (4 * j)) & 0xfu];
    }
  } else if constexpr (K == quant::CodeKind::kE4m3) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 f = e4m3x2_to_float2(words[i] >> (16 * half));
        v[4 * i + 2 * half] = f.x, v[4 * i + 2 * half + 1] = f.y;
      }
    }
  } else {
    constexpr int kBits = K == quant::CodeKind::kUint4 ? 4 : 8;
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1;
    const float bias = 8388608.0f + zero;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < kPerWord; ++j)
        v[kPerWord * i + j] = __uint_as_float(0x4B000000u | ((words[i] >> (kBits * j)) & kMask)) - bias;
    }
  }
}

// sums[m][r] += scale · Σ_j v_j · x[r, k + j] for one piece of each of the M
// rows at column k; x is the predecessor's output (plain loads).
template <quant::CodeKind K, int M, int N>
__device__ __forceinline__ void quant_piece(float (&sums)[M][N], const uint4 (&piece)[M],
                                            const float (&scale)[M], const float (&zero)[M],
                                            const Bf16Bits* x, int in, int k) {
  constexpr int C = piece_columns<K>();
  float v[M][C];
#pragma unroll
  for (int m = 0; m < M; ++m) decode_piece<K>(piece[m], zero[m], v[m]);
#pragma unroll
  for (int r = 0; r < N; ++r) {
    float dot[M];
#pragma unroll
    for (int m = 0; m < M; ++m) dot[m] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c += 8) {
      float xf[8];
      unpack8_bf16(*reinterpret_cast<const uint4*>(x + static_cast<size_t>(r) * in + k + c), xf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int j = 0; j < 8; ++j) dot[m] = fmaf(v[m][c + j], xf[j], dot[m]);
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) sums[m][r] = fmaf(scale[m], dot[m], sums[m][r]);
  }
}

// M rows of W a warp: row o, and with M = 2 row o + I (SwiGLU's up row).
// Output: y[r, o] (stored or added) or, with kSwiglu, h[r, o].
template <quant::CodeKind K, int N, int M, bool kAccumulate, bool kSwiglu>
__global__ void __launch_bounds__(32 * kQuantGemvWarps) quant_gemv_kernel(float* y, Bf16Bits* h,
                                                                          const Bf16Bits* x,
                                                                          RowPackedView w, int out) {
  constexpr int C = piece_columns<K>();
  constexpr int U = kQuantGemvUnroll;
  const int o = blockIdx.x * kQuantGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool live = o < out;
  const int pieces = w.cols / C, groups = (w.cols + w.group - 1) / w.group;
  const size_t row_pieces = static_cast<size_t>(pieces);
  const uint4* codes = reinterpret_cast<const uint4*>(w.codes);
  size_t row[M];
  row[0] = static_cast<size_t>(o);
  if constexpr (M == 2) row[1] = static_cast<size_t>(out) + o;
  uint4 piece[U][M];
  float scale[U][M], zero[U][M];
  auto load = [&](int p0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + 32 * u;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if (live && p < pieces) {
          const size_t g = row[m] * groups + static_cast<size_t>(p) * C / w.group;
          piece[u][m] = __ldg(codes + row[m] * row_pieces + p);
          scale[u][m] = __ldg(w.scales + g);
          zero[u][m] = w.zeros ? __ldg(w.zeros + g) : 0.0f;
        }
      }
    }
  };
  // The weights are the step's constants: their first pieces load before
  // the wait for the predecessor (programmatic dependent launch).
  load(lane);
  begin_dependent();
  if (!live) return;
  float sums[M][N];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < N; ++r) sums[m][r] = 0.0f;
  }
  for (int p0 = lane; p0 < pieces; p0 += 32 * U) {
    if (p0 != lane) load(p0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p0 + 32 * u < pieces) {
        quant_piece<K, M, N>(sums, piece[u], scale[u], zero[u], x, w.cols, (p0 + 32 * u) * C);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < N; ++r) {
    float total[M];
#pragma unroll
    for (int m = 0; m < M; ++m) total[m] = warp_sum(sums[m][r]);
    if (lane != r) continue;
    if constexpr (kSwiglu) {
      const float g = total[0], u = total[M - 1];
      h[static_cast<size_t>(r) * out + o] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
    } else {
      float* at = y + static_cast<size_t>(r) * out + o;
      *at = kAccumulate ? *at + total[0] : total[0];
    }
  }
}

// Stores 8 consecutive values of a row: bf16 or fp32.
__device__ __forceinline__ void store8(Bf16Bits* dst, const float* v) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                              pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
}
__device__ __forceinline__ void store8(float* dst, const float* v) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

template <quant::CodeKind K, typename Out>
__global__ void dequantize_rows_kernel(Out* out, RowPackedView w) {
  constexpr int C = piece_columns<K>();
  const int pieces = w.cols / C, groups = (w.cols + w.group - 1) / w.group;
  const size_t total = static_cast<size_t>(w.rows) * pieces;
  begin_dependent();  // the previous projection may still read `out`
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / pieces;
    const int p = static_cast<int>(i % pieces);
    const size_t g = n * groups + static_cast<size_t>(p) * C / w.group;
    float v[C];
    decode_piece<K>(__ldg(reinterpret_cast<const uint4*>(w.codes) + i), w.zeros ? __ldg(w.zeros + g) : 0.0f, v);
    const float scale = __ldg(w.scales + g);
    Out* dst = out + n * w.cols + static_cast<size_t>(p) * C;
#pragma unroll
    for (int c = 0; c < C; ++c) v[c] *= scale;
#pragma unroll
    for (int c = 0; c < C; c += 8) store8(dst + c, v + c);
  }
}

bool quant_gemv_supported(const RowPackedView& w, int n) {
  const int C = 128 / quant::code_bits(w.kind);  // columns a 16-byte piece holds
  return n >= 1 && n <= kQuantGemvMaxRows && w.cols % C == 0 && w.group % C == 0 &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0;
}

namespace {

// Calls f(integral_constant<CodeKind>) for the weight's code kind.
template <typename F>
void with_kind(quant::CodeKind kind, F&& f) {
  switch (kind) {
    case quant::CodeKind::kUint4: f(std::integral_constant<quant::CodeKind, quant::CodeKind::kUint4>{}); break;
    case quant::CodeKind::kUint8: f(std::integral_constant<quant::CodeKind, quant::CodeKind::kUint8>{}); break;
    case quant::CodeKind::kE4m3: f(std::integral_constant<quant::CodeKind, quant::CodeKind::kE4m3>{}); break;
    case quant::CodeKind::kNf4: f(std::integral_constant<quant::CodeKind, quant::CodeKind::kNf4>{}); break;
  }
}

}  // namespace

// Whether quant_gemv takes the tensor-core form where it applies
// (COHORT_QUANT_MMA=0: the CUDA-core GEMV everywhere, for comparisons).
bool quant_mma_enabled() {
  static const bool enabled = [] {
    const char* v = read_env_knob(EnvKnob::kQuantMma);
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

bool quant_folded_norm_supported(const RowPackedView& w, int n) {
  return quant_mma_enabled() && quant_mma_supported(w, n) && w.rows % kQuantNormChunk == 0 &&
         w.cols % kQuantNormChunk == 0;
}

void quant_gemv(float* y, const Bf16Bits* x, const RowPackedView& w, int n, CUstream_st* stream,
                GemvOutput output, const FoldedNorm& norm) {
  const bool folded = norm.in_sumsq || norm.out_x;
  COHORT_CHECK_MSG(!folded || (quant_folded_norm_supported(w, n) && norm.chunk == kQuantNormChunk &&
                               (!norm.out_x || output == GemvOutput::kAccumulate)),
                   "a folded norm over [{}x{}] at {} rows (chunks of {})", w.rows, w.cols, n, norm.chunk);
  if (quant_mma_enabled() && quant_mma_supported(w, n)) {
    if (output == GemvOutput::kAccumulate) {
      launch_quant_mma<SkinnyEpilogue::kAccumulate>(y, nullptr, x, w, n, w.rows, stream, norm);
    } else {
      launch_quant_mma<SkinnyEpilogue::kStore>(y, nullptr, x, w, n, w.rows, stream, norm);
    }
    return;
  }
  const unsigned blocks = static_cast<unsigned>((w.rows + kQuantGemvWarps - 1) / kQuantGemvWarps);
  with_kind(w.kind, [&](auto kind) {
    constexpr quant::CodeKind K = decltype(kind)::value;
    with_rows(n, [&](auto rows) {
      constexpr int N = decltype(rows)::value;
      if (output == GemvOutput::kAccumulate) {
        launch_dependent(quant_gemv_kernel<K, N, 1, true, false>, blocks, 32 * kQuantGemvWarps, 0, stream,
                         y, static_cast<Bf16Bits*>(nullptr), x, w, w.rows);
      } else {
        launch_dependent(quant_gemv_kernel<K, N, 1, false, false>, blocks, 32 * kQuantGemvWarps, 0, stream,
                         y, static_cast<Bf16Bits*>(nullptr), x, w, w.rows);
      }
    });
  });
}

void quant_gemv_swiglu(Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n,
                       CUstream_st* stream, const FoldedNorm& norm) {
  const int I = w.rows / 2;
  COHORT_CHECK_MSG(!norm.out_x && (!norm.in_sumsq || (quant_folded_norm_supported(w, n) &&
                                                       norm.chunk == kQuantNormChunk)),
                   "a folded norm into the SwiGLU of [{}x{}] at {} rows", w.rows, w.cols, n);
  if (quant_mma_enabled() && quant_mma_supported(w, n)) {
    launch_quant_mma<SkinnyEpilogue::kSwiglu>(nullptr, h, x, w, n, I, stream, norm);
    return;
  }
  const unsigned blocks = static_cast<unsigned>((I + kQuantGemvWarps - 1) / kQuantGemvWarps);
  with_kind(w.kind, [&](auto kind) {
    constexpr quant::CodeKind K = decltype(kind)::value;
    with_rows(n, [&](auto rows) {
      constexpr int N = decltype(rows)::value;
      launch_dependent(quant_gemv_kernel<K, N, 2, false, true>, blocks, 32 * kQuantGemvWarps, 0, stream,
                       static_cast<float*>(nullptr), h, x, w, I);
    });
  });
}

template <typename Out>
void dequantize_rows(Out* out, const RowPackedView& w, CUstream_st* stream) {
  with_kind(w.kind, [&](auto kind) {
    constexpr quant::CodeKind K = decltype(kind)::value;
    const size_t pieces = static_cast<size_t>(w.rows) * (w.cols / piece_columns<K>());
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + 255) / 256, 4096));
    if (blocks > 0) launch_dependent(dequantize_rows_kernel<K, Out>, blocks, 256, 0, stream, out, w);
  });
}

void dequantize_rows_bf16(Bf16Bits* out, const RowPackedView& w, CUstream_st* stream) {
  dequantize_rows(out, w, stream);
}

void dequantize_rows_f32(float* out, const RowPackedView& w, CUstream_st* stream) {
  dequantize_rows(out, w, stream);
}

// The row layout's weights as the skinny GEMM's source (skinny_gemm.cuh):
// a lane's 8 columns lie in one group (groups are whole pieces of 16 or 32
// columns), so a load reads one scale and zero and 4 or 8 bytes of codes,
// and gives each value as scale * (value - zero) rounded once to bf16,
// what dequantize_rows_bf16 writes: the products are those of the bf16
// path over the expanded weight, without the expansion's round trip.
template <quant::CodeKind K>
struct SkinnyPackedWeights {
  RowPackedView w;
  int groups = 0;
  size_t row_bytes = 0;
  struct Row {
    const uint8_t* codes;
    const float* scales;
    const float* zeros;
  };
  __device__ __forceinline__ Row row(int r, int /*in: the codes' width is row_bytes*/) const {
    const size_t first = static_cast<size_t>(r) * groups;
    return {w.codes + static_cast<size_t>(r) * row_bytes, w.scales + first, w.zeros ? w.zeros + first : nullptr};
  }
  __device__ __forceinline__ uint4 load(const Row& row, int k, bool valid) const {
    if (!valid) return make_uint4(0, 0, 0, 0);
    const int g = k / w.group;
    const float scale = __ldg(row.scales + g), zero = row.zeros ? __ldg(row.zeros + g) : 0.0f;
    float v[8];
    if constexpr (K == quant::CodeKind::kUint4 || K == quant::CodeKind::kNf4) {
      const uint32_t word = __ldg(reinterpret_cast<const uint32_t*>(row.codes + k / 2));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t code = (word >> (4 * j)) & 0xfu;
        v[j] = K == quant::CodeKind::kNf4 ? kNf4LevelTable[code] : static_cast<float>(code);
      }
    } else {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(row.codes + k));
      const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if constexpr (K == quant::CodeKind::kE4m3) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float2 f = e4m3x2_to_float2(words[i] >> (16 * half));
            v[4 * i + 2 * half] = f.x, v[4 * i + 2 * half + 1] = f.y;
          }
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[4 * i + j] = static_cast<float>((words[i] >> (8 * j)) & 0xffu);
        }
      }
    }
    uint4 out;
    out.x = pack_bf16x2(scale * (v[0] - zero), scale * (v[1] - zero));
    out.y = pack_bf16x2(scale * (v[2] - zero), scale * (v[3] - zero));
    out.z = pack_bf16x2(scale * (v[4] - zero), scale * (v[5] - zero));
    out.w = pack_bf16x2(scale * (v[6] - zero), scale * (v[7] - zero));
    return out;
  }
};

bool quant_skinny_supported(const RowPackedView& w, int n) {
  return n >= 1 && n <= kSkinnyMaxRows && w.cols % (32 * kSkinnyWarps) == 0 && w.group % 8 == 0 &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0 && (w.cols * quant::code_bits(w.kind) / 8) % 16 == 0;
}

namespace {

template <SkinnyEpilogue kEpilogue>
void launch_quant_skinny(float* y, Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n, int out,
                         const SkinnyScratch& scratch, CUstream_st* stream) {
  with_kind(w.kind, [&](auto kind) {
    constexpr quant::CodeKind K = decltype(kind)::value;
    const SkinnyPackedWeights<K> weights{w, (w.cols + w.group - 1) / w.group,
                                         static_cast<size_t>(w.cols) * quant::code_bits(K) / 8};
    launch_skinny<kEpilogue>(y, h, x, weights, n, w.cols, out, scratch, stream);
  });
}

}  // namespace

void quant_skinny_gemm(float* y, const Bf16Bits* x, const RowPackedView& w, int n, const SkinnyScratch& scratch,
                       CUstream_st* stream, GemvOutput output) {
  if (output == GemvOutput::kAccumulate) {
    launch_quant_skinny<SkinnyEpilogue::kAccumulate>(y, nullptr, x, w, n, w.rows, scratch, stream);
  } else {
    launch_quant_skinny<SkinnyEpilogue::kStore>(y, nullptr, x, w, n, w.rows, scratch, stream);
  }
}

void quant_skinny_swiglu(Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n,
                         const SkinnyScratch& scratch, CUstream_st* stream) {
  launch_quant_skinny<SkinnyEpilogue::kSwiglu>(nullptr, h, x, w, n, w.rows / 2, scratch, stream);
}

}  // namespace cohort::models::cuda
