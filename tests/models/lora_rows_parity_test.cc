// The per-row LoRA kernels (models/ops/lora_rows.h) against their CPU
// reference on random inputs: 70 rows over three adapters of ranks 4, 16
// and 64 (the engine's cap) and rows without one, an adapter without the
// projection, inputs of a decode projection's width; and targets that
// share an input in one launch (q, k and v: tables a slot stride apart,
// outputs side by side in one row) against the reference once per target.
// Part of
// models_decode_ops_parity_test; skips with a message where no GPU is
// visible.
#include <gtest/gtest.h>

#include <vector>

#include "models/ops/lora_rows.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers
using testing::random_vector;

class LoraRowsParity : public DecodeOpsParity {};

TEST_F(LoraRowsParity, ShrinkAndExpandMatchTheReference) {
  const int n = 70, in = 1024, out = 768, r_max = 64;
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
  std::vector<int32_t> rows(n);
  for (int r = 0; r < n; ++r) rows[r] = r % 4 == 3 ? -1 : r % 3;
  const auto x = to_bf16(random_vector(size_t(n) * in, 60));
  const auto y0 = random_vector(size_t(n) * out, 61);
  std::vector<float> t(size_t(n) * r_max), y = y0;
  cpu::lora_shrink(t.data(), x.data(), a_host.data(), ranks.data(), rows.data(), n, in, r_max);
  cpu::lora_expand(y.data(), out, t.data(), b_host.data(), ranks.data(), scales.data(), rows.data(), n, out, r_max);

  float* g_t = up(std::vector<float>(size_t(n) * r_max, NAN));
  float* g_y = up(y0);
  const uint16_t* const* g_a = up(a_dev);
  const uint16_t* const* g_b = up(b_dev);
  cuda::lora_shrink_bf16(g_t, up(x), g_a, up(ranks), up(rows), n, in, r_max, stream_);
  cuda::lora_expand_bf16(g_y, out, g_t, g_b, up(ranks), up(scales), up(rows), n, out, r_max, stream_);
  EXPECT_LT(norm_relative(t, down(g_t, t.size())), 1e-4);
  EXPECT_LT(norm_relative(y, down(g_y, y.size())), 1e-4);
}

TEST_F(LoraRowsParity, TargetsSharingAnInputInOneLaunchMatchTheReferenceOncePerTarget) {
  const int n = 37, in = 512, r_max = 64, slots = 4;
  const std::vector<int> widths = {256, 128, 128};
  const int total = 512;
  const std::vector<int32_t> ranks = {8, 16, 0, 12};  // slot 2 empty, slot 3 a rank not a multiple of 8
  const std::vector<float> scales = {2.0f, 0.5f, 0.0f, 1.5f};
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
  for (int r = 0; r < n; ++r) rows[r] = r % 5 == 4 ? -1 : (r % 2 == 0 ? 0 : (r % 3 == 0 ? 3 : 1));
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
  float* g_t = up(std::vector<float>(t.size(), NAN));
  float* g_y = up(y0);
  cuda::lora_shrink_bf16(g_t, up(x), up(a_dev), up(ranks), up(rows), n, in, r_max, targets, stream_);
  cuda::lora_expand_bf16(g_y, total, g_t, up(b_dev), up(ranks), up(scales), up(rows), n, r_max, targets, stream_);
  EXPECT_LT(norm_relative(t, down(g_t, t.size())), 1e-4);
  EXPECT_LT(norm_relative(y, down(g_y, y.size())), 1e-4);
}

}  // namespace
}  // namespace cohort::models
