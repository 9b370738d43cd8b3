// The quantized decode projections (models/ops/quant_gemv.h) against their
// CPU reference on fresh random inputs, for every code kind the row layout
// has (int4 and int8 as cohort quantizes, GPTQ 4 and 8 bits and AWQ as the
// checkpoints pack them, FP8 with block scales, NF4), every row count the
// GEMV serves, plain, accumulating and SwiGLU forms, the tensor-core form
// for 9 to 64 rows, and the bf16 and fp32 expansions the engine and the
// QLoRA base use. Part of models_decode_ops_parity_test; skips with
// a message where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/ops/quant_gemv.h"
#include "models/ops/rmsnorm.h"
#include "tests/models/decode_parity.h"
#include "tests/models/quant/reference_packers.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers

quant::RowPackedWeight make_weight(const std::string& format, int out, int in, uint64_t seed) {
  quant::QuantizedWeight w;
  if (format == "gptq4" || format == "gptq8" || format == "awq") {
    const bool gptq = format != "awq";
    const int bits = format == "gptq8" ? 8 : 4;
    const auto iw = quant::testing::random_integer_weight(out, in, 128, bits, 1, false, seed);
    const auto t = gptq ? quant::testing::pack_gptq_reference(iw, bits, true)
                        : quant::testing::pack_awq_reference(iw);
    w.format = gptq ? quant::WeightFormat::kGptq : quant::WeightFormat::kAwq;
    w.name = format, w.rows = out, w.cols = in, w.bits = bits, w.group_size = 128;
    w.packed = t.qweight, w.zeros = t.qzeros, w.scales = t.scales;
  } else {
    const auto f = format == "int4"   ? quant::WeightFormat::kInt4
                   : format == "int8" ? quant::WeightFormat::kInt8
                   : format == "nf4"  ? quant::WeightFormat::kNf4
                                      : quant::WeightFormat::kFp8Block;
    const auto values = quant::testing::random_weights(size_t(out) * in, seed);
    w = *quant::quantize(f, format, values.data(), out, in);
  }
  auto packed = quant::pack_rows(w);
  EXPECT_TRUE(packed.is_ok()) << packed.status().to_string();
  return *packed;
}

class QuantGemvParity : public DecodeOpsParity {
 protected:
  RowPackedView upload(const quant::RowPackedWeight& w) {
    RowPackedView v;
    v.kind = w.kind, v.rows = int(w.rows), v.cols = int(w.cols), v.group = int(w.group);
    v.codes = up(w.codes);
    v.scales = up(w.scales);
    v.zeros = w.zeros.empty() ? nullptr : up(w.zeros);
    v.centred = quant::centred_uint4(w);
    return v;
  }
  // quant_gemv's store form on n rows of x against the CPU projection.
  void expect_store_matches(const quant::RowPackedWeight& w, const RowPackedView& dw, const std::vector<Bf16Bits>& x,
                            int n) {
    std::vector<float> want(size_t(n) * w.rows);
    cpu::quant_gemv(want.data(), x.data(), w, n);
    float* y = up(std::vector<float>(want.size(), NAN));
    cuda::quant_gemv(y, up(x), dw, n, stream_, cuda::GemvOutput::kStore);
    EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
  }
  // quant_gemv_swiglu (w's first half of rows gates, the second half up)
  // against the CPU form, within a bf16 rounding of h.
  void expect_swiglu_matches(const quant::RowPackedWeight& w, const RowPackedView& dw,
                             const std::vector<Bf16Bits>& x, int n) {
    std::vector<Bf16Bits> want_h(size_t(n) * w.rows / 2);
    cpu::quant_gemv_swiglu(want_h.data(), x.data(), w, n);
    Bf16Bits* h = up(std::vector<Bf16Bits>(want_h.size(), 0));
    cuda::quant_gemv_swiglu(h, up(x), dw, n, stream_);
    EXPECT_LT(norm_relative(from_bf16(want_h), down_bf16(h, want_h.size())), 1e-2);
  }
};

const char* const kFormats[] = {"int4", "int8", "fp8", "gptq4", "gptq8", "awq", "nf4"};

TEST_F(QuantGemvParity, EachCodeKindMatchesTheCpuProjectionForEachRowCount) {
  for (const char* format : kFormats) {
    for (int in : {1024, 4096 + 256}) {
      const int out = 264;  // not a whole number of blocks' rows
      const auto w = make_weight(format, out, in, 31 + in);
      const RowPackedView dw = upload(w);
      for (int n = 1; n <= cuda::kQuantGemvMaxRows; ++n) {
        SCOPED_TRACE(std::string(format) + " in " + std::to_string(in) + " n " + std::to_string(n));
        ASSERT_TRUE(cuda::quant_gemv_supported(dw, n));
        expect_store_matches(w, dw, to_bf16(testing::random_vector(size_t(n) * in, 90 + n)), n);
      }
    }
  }
  EXPECT_FALSE(cuda::quant_gemv_supported(RowPackedView{quant::CodeKind::kUint4, 8, 1000, 1000}, 1));
}

TEST_F(QuantGemvParity, AccumulateAndSwigluFormsMatch) {
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    const int in = 2048, I = 136, n = 3;
    const auto w = make_weight(format, 2 * I, in, 77);
    const RowPackedView dw = upload(w);
    const auto x = to_bf16(testing::random_vector(size_t(n) * in, 78));
    const auto y0 = testing::random_vector(size_t(n) * 2 * I, 79);
    std::vector<float> want(y0.size());
    cpu::quant_gemv(want.data(), x.data(), w, n);
    for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
    float* y = up(y0);
    cuda::quant_gemv(y, up(x), dw, n, stream_, cuda::GemvOutput::kAccumulate);
    EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
    expect_swiglu_matches(w, dw, x, n);
  }
}

// Projections of more tiles than two blocks an SM (q|k|v and gate|up of an
// 8B model) take the three-blocks shape for centred 4-bit and e4m3 codes;
// the GPTQ weight (its own zeros) the general one. All against the CPU.
TEST_F(QuantGemvParity, WideProjectionsMatchTheCpuProjection) {
  for (const char* format : {"int4", "gptq4", "fp8"}) {
    const int in = 1024, out = 8200;  // 513 tiles of 16 rows, the last partial
    const auto w = make_weight(format, out, in, 51);
    EXPECT_EQ(quant::centred_uint4(w), std::string(format) == "int4");
    const RowPackedView dw = upload(w);
    for (int n : {1, 3, 8}) {
      SCOPED_TRACE(std::string(format) + " n " + std::to_string(n));
      const auto x = to_bf16(testing::random_vector(size_t(n) * in, 52 + n));
      expect_store_matches(w, dw, x, n);
      expect_swiglu_matches(w, dw, x, n);
    }
  }
}

// The tensor-core form for 9 to 64 rows: the bf16 projection over the
// weight dequantized and rounded to bf16 (what it decodes in registers),
// for every code kind, the row counts of the decode buckets and odd ones,
// store, accumulate and SwiGLU, with and without the K split's scratch.
TEST_F(QuantGemvParity, TheSkinnyFormIsTheBf16ProjectionOfTheRoundedWeights) {
  cuda::SkinnyScratch scratch;
  scratch.partials = up(std::vector<float>(cuda::kSkinnyScratchFloats, NAN));
  scratch.arrivals = up(std::vector<int>(cuda::kSkinnyScratchTiles, 0));
  for (const char* format : kFormats) {
    const int in = 4096, out = 264;  // K splits up to 8 with the scratch; a partial output tile; SwiGLU: 132 of each
    const auto w = make_weight(format, out, in, 41);
    std::vector<float> dense(size_t(out) * in);
    quant::dequantize(w, dense.data());
    const std::vector<Bf16Bits> w16 = to_bf16(dense);
    const RowPackedView dw = upload(w);
    for (int n : {9, 16, 24, 33, 48, 64}) {
      for (bool split : {false, true}) {
        SCOPED_TRACE(std::string(format) + " n " + std::to_string(n) + (split ? " split" : ""));
        ASSERT_TRUE(cuda::quant_skinny_supported(dw, n));
        if (split) {
          ASSERT_GT(cuda::skinny_splits((out + 15) / 16, in), 1);
        }
        const cuda::SkinnyScratch use = split ? scratch : cuda::SkinnyScratch{};
        const auto x = to_bf16(testing::random_vector(size_t(n) * in, 60 + n));
        const Bf16Bits* gx = up(x);
        std::vector<float> want(size_t(n) * out);
        cpu::gemv_bf16(want.data(), x.data(), w16.data(), n, in, out);
        float* y = up(std::vector<float>(want.size(), NAN));
        cuda::quant_skinny_gemm(y, gx, dw, n, use, stream_, cuda::GemvOutput::kStore);
        EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
        const auto y0 = testing::random_vector(want.size(), 61);
        float* acc = up(y0);
        cuda::quant_skinny_gemm(acc, gx, dw, n, use, stream_, cuda::GemvOutput::kAccumulate);
        std::vector<float> want_acc = want;
        for (size_t i = 0; i < want.size(); ++i) want_acc[i] += y0[i];
        EXPECT_LT(norm_relative(want_acc, down(acc, want.size())), 1e-5);
        std::vector<Bf16Bits> want_h(size_t(n) * out / 2);
        cpu::gemv_swiglu_bf16(want_h.data(), x.data(), w16.data(), n, in, out / 2);
        Bf16Bits* h = up(std::vector<Bf16Bits>(want_h.size(), 0xffff));
        cuda::quant_skinny_swiglu(h, gx, dw, n, use, stream_);
        EXPECT_LT(norm_relative(from_bf16(want_h), down_bf16(h, want_h.size())), 1e-2);
      }
    }
  }
  EXPECT_FALSE(cuda::quant_skinny_supported(RowPackedView{quant::CodeKind::kUint8, 8, 1000, 128}, 16));
  EXPECT_FALSE(cuda::quant_skinny_supported(RowPackedView{quant::CodeKind::kUint8, 8, 1024, 128}, 65));
}

// The folded norm on the tensor-core form (chains of 16-column sums): a
// consumer equals the projection of bf16(x * w) scaled by the row's
// 1 / rms(x), plain and SwiGLU; a producer adds into the residual and
// leaves the next norm's input and the sums of squares of its chunks.
TEST_F(QuantGemvParity, TheFoldedNormFormsMatchTheirDefinition) {
  const int in = 1024, out = 512, n = 3;
  const float eps = 1e-6f;
  auto scaled = [](std::vector<float> v, float by) {
    for (float& e : v) e *= by;
    return v;
  };
  for (const char* format : {"int4", "gptq4", "fp8"}) {
    SCOPED_TRACE(format);
    const auto w = make_weight(format, out, in, 81);
    const RowPackedView dw = upload(w);
    ASSERT_TRUE(cuda::quant_folded_norm_supported(dw, n));
    // Consumer: the chain starts from the residual x and the norm weight g.
    const auto x = scaled(testing::random_vector(size_t(n) * in, 82), 3.0f);
    const auto g = testing::random_vector(in, 83);
    std::vector<float> xg(x.size());
    std::vector<double> inv_rms(n);
    for (int r = 0; r < n; ++r) {
      double ss = 0.0;
      for (int k = 0; k < in; ++k) {
        const size_t i = size_t(r) * in + k;
        xg[i] = x[i] * g[k];
        ss += double(x[i]) * x[i];
      }
      inv_rms[r] = 1.0 / std::sqrt(ss / in + eps);
    }
    const auto xg16 = to_bf16(xg);
    Bf16Bits* xn = up(std::vector<Bf16Bits>(xg16.size(), 0));
    float* sums = up(std::vector<float>(size_t(n) * in / cuda::kQuantNormChunk, NAN));
    cuda::rms_chunks_bf16(up(x), up(g), xn, sums, n, in, stream_, cuda::kQuantNormChunk);
    EXPECT_EQ(down_bf16(xn, xg16.size()), from_bf16(xg16));
    cuda::FoldedNorm consume;
    consume.in_sumsq = sums, consume.eps = eps, consume.chunk = cuda::kQuantNormChunk;
    std::vector<float> want(size_t(n) * out);
    cpu::quant_gemv(want.data(), xg16.data(), w, n);
    std::vector<float> want_h(size_t(n) * out / 2);
    for (int r = 0; r < n; ++r) {
      for (int o = 0; o < out; ++o) want[size_t(r) * out + o] = float(want[size_t(r) * out + o] * inv_rms[r]);
      for (int o = 0; o < out / 2; ++o) {
        const float gate = want[size_t(r) * out + o], u = want[size_t(r) * out + out / 2 + o];
        want_h[size_t(r) * out / 2 + o] = gate / (1.0f + std::exp(-gate)) * u;
      }
    }
    float* y = up(std::vector<float>(want.size(), NAN));
    cuda::quant_gemv(y, xn, dw, n, stream_, cuda::GemvOutput::kStore, consume);
    EXPECT_LT(norm_relative(want, down(y, want.size())), 1e-5);
    Bf16Bits* h = up(std::vector<Bf16Bits>(want_h.size(), 0));
    cuda::quant_gemv_swiglu(h, xn, dw, n, stream_, consume);
    EXPECT_LT(norm_relative(want_h, down_bf16(h, want_h.size())), 1e-2);
    // Producer: residual y0 += W · xg, then bf16(y * g2) and the chunks' sums.
    const auto y0 = testing::random_vector(size_t(n) * out, 84);
    const auto g2 = testing::random_vector(out, 85);
    std::vector<float> sum(want.size());
    cpu::quant_gemv(sum.data(), xg16.data(), w, n);
    std::vector<float> want_y(sum.size()), want_x(sum.size()), want_ss(size_t(n) * out / cuda::kQuantNormChunk, 0.0f);
    for (size_t i = 0; i < sum.size(); ++i) {
      want_y[i] = y0[i] + sum[i];
      want_x[i] = want_y[i] * g2[i % out];
      want_ss[i / cuda::kQuantNormChunk] += want_y[i] * want_y[i];
    }
    float* res = up(y0);
    Bf16Bits* next_x = up(std::vector<Bf16Bits>(want_x.size(), 0));
    float* next_sums = up(std::vector<float>(want_ss.size(), NAN));
    cuda::FoldedNorm produce;
    produce.out_weight = up(g2), produce.out_x = next_x, produce.out_sumsq = next_sums;
    produce.chunk = cuda::kQuantNormChunk;
    cuda::quant_gemv(res, xn, dw, n, stream_, cuda::GemvOutput::kAccumulate, produce);
    EXPECT_LT(norm_relative(want_y, down(res, want_y.size())), 1e-5);
    EXPECT_LT(norm_relative(want_x, down_bf16(next_x, want_x.size())), 1e-2);
    EXPECT_LT(norm_relative(want_ss, down(next_sums, want_ss.size())), 1e-5);
  }
}

TEST_F(QuantGemvParity, Fp32ExpansionIsTheLayoutsDequantization) {
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    const auto w = make_weight(format, 96, 1024, 56);
    std::vector<float> want(size_t(w.rows * w.cols));
    quant::dequantize(w, want.data());
    float* out = up(std::vector<float>(want.size(), NAN));
    cuda::dequantize_rows_f32(out, upload(w), stream_);
    EXPECT_EQ(down(out, want.size()), want);
  }
}

TEST_F(QuantGemvParity, Bf16ExpansionIsTheLayoutsDequantizationRounded) {
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    const auto w = make_weight(format, 96, 1024, 55);
    std::vector<float> want(size_t(w.rows * w.cols));
    quant::dequantize(w, want.data());
    Bf16Bits* out = up(std::vector<Bf16Bits>(want.size(), 0xffff));
    cuda::dequantize_rows_bf16(out, upload(w), stream_);
    const auto got = down_bf16(out, want.size());
    const auto rounded_want = rounded(want);
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != rounded_want[i];
    EXPECT_EQ(differ, 0u);
  }
}

}  // namespace
}  // namespace cohort::models
