// The per-row LoRA kernel (models/ops/lora_rows.h) against its CPU
// reference (shrink then expand) on random inputs, as decode steps and
// prompts give it rows: rows over three adapters of ranks 4, 16 and 64
// (the engine's cap) and rows without one, an adapter without the
// projection, inputs of a decode projection's width, rows interleaved and
// in runs that end inside a tile; and targets that share an input in one
// launch (q, k and v: tables a slot stride apart, outputs side by side in
// one row, a rank not a multiple of 8 and an odd one) against the
// reference once per target; an input whose RMSNorm the projection folds
// (each row's delta scaled by its sums of squares); and prompts' runs of
// one adapter through the run kernels (lora_runs_bf16); and the dense form
// (lora_dense_bf16: every adapter side by side, cuBLAS GEMMs over all rows)
// against the same reference, its mask exactly against cpu::lora_mask; and
// the dense form's gate/up expand joined with the activation
// (lora_swiglu_bf16) against the expand then the activation. Part of
// models_decode_ops_parity_test; skips with a message where no GPU is
// visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/cuda/cublas_api.h"
#include "models/ops/lora_rows.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers
using testing::random_vector;

class LoraRowsParity : public DecodeOpsParity {
 protected:
  // dense: through the dense form (lora_dense_bf16), the adapters side by side.
  void shrink_and_expand(int n, bool runs, bool sorted, bool folded_norm = false, bool dense = false);
  // as_runs: rows in runs of one adapter, through the run kernels
  // (lora_runs_bf16) in 16-row tiles, as prompt steps take them; dense:
  // through the dense form, as the engine lays the adapters out for it.
  void targets_in_one_launch(int n, bool sorted, bool as_runs = false, bool dense = false);
  // lora_swiglu_bf16 against the expand's reference then the activation's.
  void gate_up_with_the_activation(int n, int I, bool runs, bool sorted);
  // The rows by adapter as the engine orders them, on the device, or null
  // (rows as they are).
  const int32_t* row_order(const std::vector<int32_t>& rows, int slots, bool sorted) {
    if (!sorted) return nullptr;
    std::vector<int32_t> order(rows.size());
    lora_rows_by_adapter(order.data(), rows.data(), static_cast<int>(rows.size()), slots);
    return up(order);
  }
};

// Row r's adapter among `adapters` (-1: none): interleaved as a decode
// step's rows, or in runs of 1 to 40 rows as prompts' rows.
std::vector<int32_t> row_adapters(int n, int adapters, bool runs) {
  std::vector<int32_t> rows(n);
  if (!runs) {
    for (int r = 0; r < n; ++r) rows[r] = r % 4 == 3 ? -1 : r % adapters;
    return rows;
  }
  for (int r = 0, run = 0; r < n; ++run) {
    const int length = 1 + (run * 17) % 40, adapter = run % (adapters + 1) - 1;
    for (int i = 0; i < length && r < n; ++i) rows[r++] = adapter;
  }
  return rows;
}

void LoraRowsParity::shrink_and_expand(int n, bool runs, bool sorted, bool folded_norm, bool dense) {
  SCOPED_TRACE(::testing::Message() << n << " rows" << (runs ? " in runs" : " interleaved")
                                    << (sorted ? ", sorted by adapter" : "") << (folded_norm ? ", folded norm" : "")
                                    << (dense ? ", dense form" : ""));
  const int in = 1024, out = 768, r_max = 64;
  const std::vector<int32_t> ranks = {4, 16, 64};
  const std::vector<float> scales = {2.0f, 0.5f, 1.25f};
  std::vector<std::vector<uint16_t>> A, B;
  std::vector<const uint16_t*> a_host, b_host, a_dev, b_dev;
  for (int a = 0; a < 3; ++a) {
    A.push_back(to_bf16(random_vector(size_t(ranks[a]) * in, 40 + a, 0.05f)));
    B.push_back(to_bf16(random_vector(size_t(out) * ranks[a], 50 + a, 0.05f)));
    a_host.push_back(A[a].data()), a_dev.push_back(up(A[a]));
    const bool has_b = a != 1;  // adapter 1 does not target this projection
    b_host.push_back(has_b ? B[a].data() : nullptr), b_dev.push_back(has_b ? up(B[a]) : nullptr);
  }
  const std::vector<int32_t> rows = row_adapters(n, 3, runs);
  const auto x = to_bf16(random_vector(size_t(n) * in, 60));
  const auto y0 = random_vector(size_t(n) * out, 61);
  std::vector<float> t(size_t(n) * r_max), y = y0;
  cpu::lora_shrink(t.data(), x.data(), a_host.data(), ranks.data(), rows.data(), n, in, r_max);
  // A folded norm's input: each row's t scales by rsqrt(Σ sums / in + eps).
  const int chunks = in / 64;
  const float eps = 1e-6f;
  std::vector<float> sumsq(size_t(n) * chunks);
  for (size_t i = 0; i < sumsq.size(); ++i) sumsq[i] = 0.5f + float((i * 37) % 101) / 50.0f;
  cuda::LoraInputNorm norm;
  if (folded_norm) {
    for (int r = 0; r < n; ++r) {
      float ss = 0;
      for (int c = 0; c < chunks; ++c) ss += sumsq[size_t(r) * chunks + c];
      const float factor = 1.0f / std::sqrt(ss / float(in) + eps);
      for (int c = 0; c < r_max; ++c) t[size_t(r) * r_max + c] *= factor;
    }
    norm.sumsq = up(sumsq), norm.eps = eps;
  }
  cpu::lora_expand(y.data(), out, t.data(), b_host.data(), ranks.data(), scales.data(), rows.data(), n, out, r_max);

  float* g_y = up(y0);
  if (dense) {
    // Columns 0-3, 4-19, 20-83 (88 with the padding); adapter 1's B zero.
    const std::vector<int32_t> column = {0, 4, 20};
    const int columns = 88;
    std::vector<uint16_t> a_cat(size_t(columns) * in, 0), b_cat(size_t(out) * columns, 0);
    for (int a = 0; a < 3; ++a) {
      std::copy(A[a].begin(), A[a].end(), a_cat.begin() + size_t(column[a]) * in);
      for (int o = 0; o < out && b_host[a]; ++o) {
        std::copy(B[a].begin() + size_t(o) * ranks[a], B[a].begin() + size_t(o + 1) * ranks[a],
                  b_cat.begin() + size_t(o) * columns + column[a]);
      }
    }
    cuda::LoraDense form;
    form.columns = columns, form.a = up(a_cat), form.b = up(b_cat), form.column = up(column);
    form.t = up(std::vector<float>(size_t(n) * columns, NAN));
    form.masked = up(std::vector<uint16_t>(size_t(n) * columns, kBf16NaN));
    cublasContext* blas = nullptr;
    ASSERT_EQ(cuda::blas::loaded().create(&blas), CUBLAS_STATUS_SUCCESS);
    cuda::LoraTargets one;
    one.width[0] = out;
    cuda::lora_dense_bf16(blas, g_y, out, up(x), form, up(ranks), up(scales), up(rows), n, in, one, stream_, norm);
    const std::vector<float> got = down(g_y, y.size());
    cuda::blas::loaded().destroy(blas);
    std::vector<float> want_delta(y.size()), got_delta(y.size());
    for (size_t i = 0; i < y.size(); ++i) want_delta[i] = y[i] - y0[i], got_delta[i] = got[i] - y0[i];
    EXPECT_LT(norm_relative(want_delta, got_delta), 5e-3);  // t rounded to bf16
    for (int r = 0; r < n; ++r) {
      if (rows[r] >= 0 && rows[r] != 1) continue;
      for (int o = 0; o < out; ++o) ASSERT_EQ(got[size_t(r) * out + o], y0[size_t(r) * out + o]) << "row " << r;
    }
    return;
  }
  cuda::lora_rows_bf16(g_y, out, up(x), up(a_dev), up(b_dev), up(ranks), up(scales), up(rows),
                       row_order(rows, 3, sorted), n, in, out, stream_, norm);
  const std::vector<float> got = down(g_y, y.size());
  EXPECT_LT(norm_relative(y, got), 1e-4);
  for (int r = 0; r < n; ++r) {
    if (rows[r] >= 0 && rows[r] != 1) continue;  // adapter 1 lacks this projection's B
    for (int o = 0; o < out; ++o) ASSERT_EQ(got[size_t(r) * out + o], y0[size_t(r) * out + o]) << "row " << r;
  }
}

TEST_F(LoraRowsParity, ShrinkAndExpandMatchTheReference) {
  shrink_and_expand(70, false, false);   // a decode step's rows, each tile over all three adapters
  shrink_and_expand(70, false, true);    // the same rows as the engine orders them
  shrink_and_expand(300, true, false);   // prompts' runs, ending inside tiles
  shrink_and_expand(300, true, true);
}

TEST_F(LoraRowsParity, AFoldedNormsSumsScaleEachRowsDelta) {
  shrink_and_expand(70, false, true, /*folded_norm=*/true);  // the layers' folded form at decode
  shrink_and_expand(40, true, false, /*folded_norm=*/true);
}

void LoraRowsParity::targets_in_one_launch(int n, bool sorted, bool as_runs, bool dense) {
  SCOPED_TRACE(::testing::Message() << n << " rows" << (sorted ? ", sorted by adapter" : "")
                                    << (as_runs ? ", runs through the run kernels" : "")
                                    << (dense ? ", the dense form" : ""));
  const int in = 512, r_max = 64, slots = 5;
  const std::vector<int> widths = {256, 128, 128};
  const int total = 512;
  // Slot 2 empty, slot 3 a rank not a multiple of 8, slot 4 an odd rank.
  const std::vector<int32_t> ranks = {8, 16, 0, 12, 5};
  const std::vector<float> scales = {2.0f, 0.5f, 0.0f, 1.5f, 0.75f};
  std::vector<std::vector<uint16_t>> keep;
  // Tables of 3 targets x `slots`, as the engine lays them out.
  std::vector<const uint16_t*> a_host(3 * slots, nullptr), b_host(3 * slots, nullptr), a_dev = a_host, b_dev = b_host;
  for (int z = 0; z < 3; ++z) {
    for (int a = 0; a < slots; ++a) {
      if (ranks[a] == 0 || (z == 2 && a == 3)) continue;  // slot 3 does not target v
      keep.push_back(to_bf16(random_vector(size_t(ranks[a]) * in, 70 + 10 * z + a, 0.05f)));
      a_host[z * slots + a] = keep.back().data(), a_dev[z * slots + a] = up(keep.back());
      keep.push_back(to_bf16(random_vector(size_t(widths[z]) * ranks[a], 80 + 10 * z + a, 0.05f)));
      b_host[z * slots + a] = keep.back().data(), b_dev[z * slots + a] = up(keep.back());
    }
  }
  std::vector<int32_t> rows(n);
  for (int r = 0; r < n; ++r) rows[r] = r % 5 == 4 ? -1 : (r % 2 == 0 ? 0 : (r % 3 == 0 ? 3 : (r % 7 == 1 ? 4 : 1)));
  // Runs of 1 to 50 rows over slots 0, 1, none, 3 and 4, cut into tiles of
  // up to 16 rows as the engine cuts them (the last of a run partial).
  std::vector<int32_t> tiles;
  if (as_runs) {
    const int run_slots[] = {0, 1, -1, 3, 4};
    for (int r = 0, run = 0; r < n; ++run) {
      const int length = std::min(n - r, 1 + (run * 23) % 50), slot = run_slots[run % 5];
      for (int first = r; slot >= 0 && first < r + length; first += cuda::kLoraRunTileRows) {
        tiles.insert(tiles.end(), {first, std::min(cuda::kLoraRunTileRows, r + length - first), slot});
      }
      for (int i = 0; i < length; ++i) rows[r++] = slot;
    }
  }
  const auto x = to_bf16(random_vector(size_t(n) * in, 90));
  const auto y0 = random_vector(size_t(n) * total, 91);
  std::vector<float> y = y0, t(size_t(3) * n * r_max);
  for (int z = 0, column = 0; z < 3; column += widths[z], ++z) {
    float* tz = t.data() + size_t(z) * n * r_max;
    cpu::lora_shrink(tz, x.data(), a_host.data() + z * slots, ranks.data(), rows.data(), n, in, r_max);
    cpu::lora_expand(y.data() + column, total, tz, b_host.data() + z * slots, ranks.data(), scales.data(), rows.data(),
                     n, widths[z], r_max);
  }
  cuda::LoraTargets targets;
  targets.count = 3, targets.table_stride = slots;
  for (int z = 0, column = 0; z < 3; column += widths[z], ++z) targets.width[z] = widths[z], targets.column[z] = column;
  float* g_y = up(y0);
  if (dense) {
    // Slot s's columns start at the ranks before it; A rows target by
    // target, B columns within each output row.
    std::vector<int32_t> column(slots);
    int columns = 0;
    for (int a = 0; a < slots; ++a) column[a] = columns, columns += ranks[a];
    // B block diagonal: target z's outputs (rows) read its block of columns.
    std::vector<uint16_t> a_cat(size_t(3) * columns * in, 0), b_cat(size_t(total) * 3 * columns, 0);
    cuda::LoraDense form;
    form.columns = columns;
    for (int z = 0, output = 0; z < 3; output += widths[z], ++z) {
      for (int a = 0; a < slots; ++a) {
        if (!a_host[z * slots + a]) continue;
        std::copy(a_host[z * slots + a], a_host[z * slots + a] + size_t(ranks[a]) * in,
                  a_cat.begin() + (size_t(z) * columns + column[a]) * in);
        for (int o = 0; o < widths[z]; ++o) {
          std::copy(b_host[z * slots + a] + size_t(o) * ranks[a], b_host[z * slots + a] + size_t(o + 1) * ranks[a],
                    b_cat.begin() + size_t(output + o) * 3 * columns + size_t(z) * columns + column[a]);
        }
      }
    }
    form.a = up(a_cat), form.b = up(b_cat), form.column = up(column);
    form.t = up(std::vector<float>(size_t(n) * 3 * columns, NAN));
    form.masked = up(std::vector<uint16_t>(size_t(n) * 3 * columns, kBf16NaN));
    cublasContext* blas = nullptr;
    ASSERT_EQ(cuda::blas::loaded().create(&blas), CUBLAS_STATUS_SUCCESS);
    const int32_t* g_rows = up(rows);
    cuda::lora_dense_bf16(blas, g_y, total, up(x), form, up(ranks), up(scales), g_rows, n, in, targets, stream_);
    // The mask alone, against its reference rounded to bf16.
    const std::vector<float> t = down(form.t, size_t(n) * 3 * columns);
    std::vector<float> want(t.size());
    cpu::lora_mask(want.data(), t.data(), rows.data(), column.data(), ranks.data(), scales.data(), n, 3 * columns,
                   columns);
    std::vector<uint16_t> masked(t.size());
    ASSERT_EQ(cudaMemcpy(masked.data(), form.masked, masked.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < masked.size(); ++i) ASSERT_EQ(masked[i], float_to_bf16_bits(want[i])) << "element " << i;
    cuda::blas::loaded().destroy(blas);
    // t rounded to bf16 before the expand: within bf16's rounding of the
    // adapters' deltas, which are each row's only change.
    const std::vector<float> got = down(g_y, y.size());
    std::vector<float> want_delta(y.size()), got_delta(y.size());
    for (size_t i = 0; i < y.size(); ++i) want_delta[i] = y[i] - y0[i], got_delta[i] = got[i] - y0[i];
    EXPECT_LT(norm_relative(want_delta, got_delta), 5e-3);
    for (int r = 0; r < n; ++r) {
      if (rows[r] >= 0) continue;
      for (int o = 0; o < total; ++o) ASSERT_EQ(got[size_t(r) * total + o], y0[size_t(r) * total + o]) << "row " << r;
    }
    return;
  }
  if (as_runs) {
    float* scratch = up(std::vector<float>(size_t(n) * cuda::kLoraRunScratchStride, 0.0f));
    cuda::lora_runs_bf16(g_y, total, up(x), up(a_dev), up(b_dev), up(ranks), up(scales), up(tiles),
                         static_cast<int>(tiles.size() / 3), scratch, in, targets, stream_);
  } else {
    cuda::lora_rows_bf16(g_y, total, up(x), up(a_dev), up(b_dev), up(ranks), up(scales), up(rows),
                         row_order(rows, slots, sorted), n, in, targets, stream_);
  }
  const std::vector<float> got = down(g_y, y.size());
  EXPECT_LT(norm_relative(y, got), 1e-4);
  for (int r = 0; r < n; ++r) {
    if (rows[r] >= 0) continue;
    for (int o = 0; o < total; ++o) ASSERT_EQ(got[size_t(r) * total + o], y0[size_t(r) * total + o]) << "row " << r;
  }
}

TEST_F(LoraRowsParity, TargetsSharingAnInputInOneLaunchMatchTheReferenceOncePerTarget) {
  targets_in_one_launch(37, false);
  targets_in_one_launch(203, true);  // the last tile partial
}

TEST_F(LoraRowsParity, RunsOfOneAdapterInTilesMatchTheReference) {
  targets_in_one_launch(37, false, /*as_runs=*/true);
  targets_in_one_launch(531, false, /*as_runs=*/true);
}

TEST_F(LoraRowsParity, TheDenseFormOverEveryAdapterMatchesTheReference) {
  targets_in_one_launch(37, false, false, /*dense=*/true);
  targets_in_one_launch(531, false, /*as_runs=*/true, /*dense=*/true);  // prompts' runs
  shrink_and_expand(70, false, false, /*folded_norm=*/false, /*dense=*/true);
  shrink_and_expand(64, false, false, /*folded_norm=*/true, /*dense=*/true);  // a decode step's folded layers
}

// lora_swiglu_bf16 on n rows of an intermediate I: adapters of ranks 8, 16,
// 5 and 40 side by side (columns that start off a multiple of 8, and a span
// wider than the pieces a thread keeps), rows without one, interleaved or in
// runs, in row order or sorted; its B random in the padding too (the masked
// rows' zeros must cancel it).
void LoraRowsParity::gate_up_with_the_activation(int n, int I, bool runs, bool sorted) {
  SCOPED_TRACE(::testing::Message() << n << " rows, I " << I << (runs ? ", runs" : "") << (sorted ? ", sorted" : ""));
  const std::vector<int32_t> ranks = {8, 16, 5, 40};
  std::vector<int32_t> column(ranks.size());
  int used = 0;
  for (size_t s = 0; s < ranks.size(); ++s) column[s] = used, used += ranks[s];
  const int C = (used + 7) / 8 * 8, slots = static_cast<int>(ranks.size());
  const std::vector<int32_t> rows = row_adapters(n, slots, runs);
  const auto noise = random_vector(size_t(n) * 2 * C + size_t(2) * I * 2 * C, 95);
  std::vector<uint16_t> masked(size_t(n) * 2 * C, 0), b(size_t(2) * I * 2 * C, 0);
  for (int r = 0; r < n; ++r) {
    if (rows[r] < 0) continue;
    for (int c = column[rows[r]]; c < column[rows[r]] + ranks[rows[r]]; ++c) {
      for (int half = 0; half < 2; ++half) {
        const size_t at = size_t(r) * 2 * C + size_t(half) * C + c;
        masked[at] = float_to_bf16_bits(noise[at]);
      }
    }
  }
  const float* b_noise = noise.data() + size_t(n) * 2 * C;
  for (int o = 0; o < 2 * I; ++o) {
    const size_t block = o < I ? 0 : size_t(C);  // gate rows read columns [0, C), up rows [C, 2C)
    for (int c = 0; c < C; ++c) b[size_t(o) * 2 * C + block + c] = float_to_bf16_bits(b_noise[size_t(o) * 2 * C + c]);
  }
  const std::vector<float> gate_up = random_vector(size_t(n) * 2 * I, 96);
  std::vector<float> want(size_t(n) * I);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < I; ++i) {
      float g = gate_up[size_t(r) * 2 * I + i], u = gate_up[size_t(r) * 2 * I + I + i];
      for (int c = 0; c < C; ++c) {
        g += bf16_bits_to_float(masked[size_t(r) * 2 * C + c]) * bf16_bits_to_float(b[size_t(i) * 2 * C + c]);
        u += bf16_bits_to_float(masked[size_t(r) * 2 * C + C + c]) *
             bf16_bits_to_float(b[size_t(I + i) * 2 * C + C + c]);
      }
      want[size_t(r) * I + i] = g / (1.0f + std::exp(-g)) * u;
    }
  }
  cuda::LoraDense form;
  form.columns = C, form.b = up(b), form.masked = up(masked), form.column = up(column);
  uint16_t* g_h = up(std::vector<uint16_t>(size_t(n) * I, kBf16NaN));
  std::vector<int32_t> order(rows.size());
  lora_rows_by_adapter(order.data(), rows.data(), n, slots);
  cuda::lora_swiglu_bf16(g_h, up(gate_up), form, up(ranks), up(rows), sorted ? up(order) : nullptr, n, I, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const std::vector<float> got = down_bf16(g_h, size_t(n) * I);
  for (size_t e = 0; e < got.size(); ++e) ASSERT_TRUE(std::isfinite(got[e])) << "element " << e << " not written";
  EXPECT_LT(norm_relative(want, got), 5e-3);
}

TEST_F(LoraRowsParity, TheGateAndUpExpandWithTheActivationMatchesTheReference) {
  gate_up_with_the_activation(37, 200, false, false);  // a decode step's rows, interleaved
  gate_up_with_the_activation(37, 200, false, true);
  gate_up_with_the_activation(300, 328, true, true);   // prompts' runs, several blocks of rows
  gate_up_with_the_activation(300, 328, true, false);
}

}  // namespace
}  // namespace cohort::models
