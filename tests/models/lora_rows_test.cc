// The graph engine's per-row LoRA reference (models/ops/lora_rows.h): shrink
// then expand adds scale_a · B_a A_a x to each row of adapter a, with its own
// rank (under the padded r_max), nothing to rows without an adapter or for
// an adapter without the projection; the dense form's mask keeps each row's
// adapter's columns of every target, scaled; and the CUDA kernels (where a GPU is
// visible, models_decode_ops_parity_test) match it.
#include <gtest/gtest.h>

#include <vector>

#include "base/half_float.h"
#include "models/ops/lora_rows.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using testing::random_vector;

std::vector<Bf16Bits> bf16(const std::vector<float>& v) {
  std::vector<Bf16Bits> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16_bits(v[i]);
  return out;
}
float f(Bf16Bits b) { return bf16_bits_to_float(b); }

TEST(LoraRows, EachRowGetsItsOwnAdaptersScaledDelta) {
  const int n = 5, in = 24, out = 10, r_max = 8;
  const int32_t ranks[3] = {4, 8, 2};
  const float scales[3] = {2.0f, 0.5f, 1.0f};
  std::vector<std::vector<Bf16Bits>> A, B;
  for (int a = 0; a < 3; ++a) {
    A.push_back(bf16(random_vector(size_t(ranks[a]) * in, 10 + a)));
    B.push_back(bf16(random_vector(size_t(out) * ranks[a], 20 + a)));
  }
  // Adapter 2 has no B for this projection (not one of its targets).
  const Bf16Bits* a_ptrs[3] = {A[0].data(), A[1].data(), A[2].data()};
  const Bf16Bits* b_ptrs[3] = {B[0].data(), B[1].data(), nullptr};
  const int32_t row_adapter[n] = {0, 1, -1, 2, 0};
  const auto x = bf16(random_vector(size_t(n) * in, 30));
  const auto y0 = random_vector(size_t(n) * out, 31);
  std::vector<float> t(size_t(n) * r_max, -1.0f), y = y0;
  cpu::lora_shrink(t.data(), x.data(), a_ptrs, ranks, row_adapter, n, in, r_max);
  cpu::lora_expand(y.data(), out, t.data(), b_ptrs, ranks, scales, row_adapter, n, out, r_max);
  for (int r = 0; r < n; ++r) {
    const int a = row_adapter[r];
    for (int c = 0; c < r_max; ++c) {
      if (a < 0 || c >= ranks[a]) {
        EXPECT_EQ(t[size_t(r) * r_max + c], 0.0f) << "row " << r << " rank index " << c;
      }
    }
    for (int o = 0; o < out; ++o) {
      double want = y0[size_t(r) * out + o];
      if (a >= 0 && b_ptrs[a]) {
        double delta = 0;
        for (int c = 0; c < ranks[a]; ++c) {
          double ax = 0;
          for (int k = 0; k < in; ++k) ax += double(f(A[a][size_t(c) * in + k])) * f(x[size_t(r) * in + k]);
          delta += double(f(B[a][size_t(o) * ranks[a] + c])) * ax;
        }
        want += scales[a] * delta;
      }
      EXPECT_NEAR(y[size_t(r) * out + o], want, 1e-4 * (1 + std::abs(want))) << "row " << r << " output " << o;
    }
  }
}

TEST(LoraRows, RowsByAdapterAreEachAdaptersRowsInOrderThenTheRowsWithout) {
  // Slots 0..3; -1 and 7 (outside the slots) are rows without an adapter.
  const std::vector<int32_t> row_adapter = {2, -1, 0, 2, 3, 7, 0, 2, -1, 1};
  std::vector<int32_t> order(row_adapter.size(), -5);
  lora_rows_by_adapter(order.data(), row_adapter.data(), static_cast<int>(row_adapter.size()), 4);
  EXPECT_EQ(order, (std::vector<int32_t>{2, 6, 9, 0, 3, 7, 4, 1, 5, 8}));
  lora_rows_by_adapter(order.data(), row_adapter.data(), 0, 4);  // no rows: nothing written
  EXPECT_EQ(order[0], 2);
}

TEST(LoraRows, TheDenseMaskKeepsEachRowsAdaptersColumnsOfEveryTargetScaled) {
  // Slots of ranks 2, 0 (empty) and 3: columns [0, 2), none, [2, 5); two
  // targets of 5 columns each; rows of slot 0, none, slot 2.
  const int n = 3, columns = 5, width = 2 * columns;
  const int32_t rows[n] = {0, -1, 2}, column[3] = {0, 2, 2}, ranks[3] = {2, 0, 3};
  const float scales[3] = {2.0f, 9.0f, -1.0f};
  std::vector<float> t(size_t(n) * width), out(t.size(), 7.0f);
  for (size_t i = 0; i < t.size(); ++i) t[i] = float(i + 1);
  cpu::lora_mask(out.data(), t.data(), rows, column, ranks, scales, n, width, columns);
  const std::vector<float> want = {2, 4, 0, 0, 0, 12, 14, 0, 0, 0,           // slot 0: columns 0-1, times 2
                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0,             // no adapter
                                   0, 0, -23, -24, -25, 0, 0, -28, -29, -30};  // slot 2: columns 2-4, times -1
  EXPECT_EQ(out, want);
}

}  // namespace
}  // namespace cohort::models
