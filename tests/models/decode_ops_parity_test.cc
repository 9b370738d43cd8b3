// The bf16 decode engine's kernels (models/ops/: embed_bf16, add_rmsnorm_bf16,
// qkv_rope_cache, decode_attention(_fused), swiglu_bf16, gather_rows_bf16,
// row_argmax/merge_argmax) against their CPU references, on fresh random
// inputs (the projections: decode_projection_parity_test.cc, the same binary). Outputs start as NaN so that an element the kernel never writes
// fails the comparison; bf16 results must agree to a norm-relative 1e-2.
// Skips with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "models/ops/argmax.h"
#include "models/ops/decode_attention.h"
#include "models/ops/prefill_attention.h"
#include "models/ops/embedding.h"
#include "models/ops/gemv.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/rope.h"
#include "models/ops/swiglu.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers


// Attention's splits of the context: one (no scratch needed), the launcher's
// own choice, and forced counts that cut the test's contexts into many
// ranges (each clamped to what the scratch holds).
constexpr int kAttentionSplits[] = {1, 0, 7, 64};

TEST_F(DecodeOpsParity, EmbedBf16MatchesTheEmbeddingOpOnAVocabShard) {
  const int n = 37, hidden = 320, vocab_begin = 100, rows = 150;
  const auto table = rounded(testing::random_vector(size_t(rows) * hidden, 11));
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 53) % 400;  // inside and outside the shard
  std::vector<float> want(size_t(n) * hidden);
  cpu::embedding_forward(want.data(), ids.data(), table.data(), n, hidden, vocab_begin, rows);
  float* x = up(std::vector<float>(want.size(), NAN));
  cuda::embed_bf16(x, up(to_bf16(table)), up(ids), n, hidden, vocab_begin, rows, stream_);
  EXPECT_LT(norm_relative(want, down(x, want.size())), kBf16Tol);
}

TEST_F(DecodeOpsParity, GatherRowsBf16MatchesTheCpuGather) {
  const int src_rows = 40, k = 9, hidden = 200;
  const auto src = rounded(testing::random_vector(size_t(src_rows) * hidden, 12));
  std::vector<int32_t> idx = {39, 0, 7, 7, 12, 30, 1, 25, 38};
  std::vector<float> want(size_t(k) * hidden);
  cpu::gather_rows(want.data(), src.data(), idx.data(), k, hidden);
  uint16_t* dst = up(std::vector<uint16_t>(want.size(), kBf16NaN));
  cuda::gather_rows_bf16(dst, up(to_bf16(src)), up(idx), k, hidden, stream_);
  EXPECT_LT(norm_relative(want, down_bf16(dst, want.size())), kBf16Tol);
}

// Widths kept in registers (896) and beyond them (5,000: the looping form).
TEST_F(DecodeOpsParity, AddRmsNormBf16MatchesResidualThenRmsNorm) {
  // 77 rows at 1,024 and 2,048 take the warp-a-row form, 29 the block-a-row one.
  const std::pair<int, int> cases[] = {{896, 29}, {5000, 29}, {1024, 29}, {1024, 77}, {2048, 77}};
  for (const auto& [hidden, n] : cases) {
  const auto x = testing::random_vector(size_t(n) * hidden, 13);
  const auto delta = testing::random_vector(x.size(), 14);
  const auto w = testing::random_vector(hidden, 15);
  for (bool with_delta : {false, true}) {
    SCOPED_TRACE(std::string(with_delta ? "with a residual delta" : "norm only") + ", hidden " +
                 std::to_string(hidden) + ", rows " + std::to_string(n));
    std::vector<float> sum(x.size()), want(x.size());
    if (with_delta) {
      cpu::residual_forward(sum.data(), x.data(), delta.data(), sum.size());
    } else {
      sum = x;
    }
    cpu::rmsnorm_forward(want.data(), nullptr, sum.data(), w.data(), n, hidden, 1e-6f);
    float* gx = up(x);
    uint16_t* out = up(std::vector<uint16_t>(x.size(), kBf16NaN));
    cuda::add_rmsnorm_bf16(gx, with_delta ? up(delta) : nullptr, up(w), out, n, hidden, 1e-6f,
                           stream_);
    EXPECT_LT(norm_relative(want, down_bf16(out, want.size())), kBf16Tol);
    EXPECT_LT(norm_relative(sum, down(gx, sum.size())), 1e-6);  // x updated in place
  }
  }
}

TEST_F(DecodeOpsParity, SwigluBf16MatchesTheSwigluOp) {
  for (int I : {1000, 1002}) {  // four columns a thread, and one
    SCOPED_TRACE("intermediate " + std::to_string(I));
    const int n = 23;
    const auto gate_up = testing::random_vector(size_t(n) * 2 * I, 16, 2.0f);
    std::vector<float> want(size_t(n) * I);
    cpu::swiglu_fused(want.data(), gate_up.data(), n, I);
    uint16_t* h = up(std::vector<uint16_t>(want.size(), kBf16NaN));
    cuda::swiglu_bf16(up(gate_up), h, n, I, stream_);
    EXPECT_LT(norm_relative(want, down_bf16(h, want.size())), kBf16Tol);
  }
}

class DecodeShapes : public DecodeOpsParity,
                     public ::testing::WithParamInterface<std::tuple<int, int, int, bool>> {};

TEST_P(DecodeShapes, QkvRopeCacheMatchesBiasNormRopeAndCacheWrite) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  for (bool paged : {false, true}) {
  SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
  const int slots = 5, capacity = 64;
  const Rows rows = decode_rows(slots, capacity);
  const int n = static_cast<int>(rows.slots.size());
  const CacheLayout layout = cache_layout(paged, slots + 1, capacity);
  const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
  const RopeTable rope = rope_table(D, capacity);
  const size_t ld = size_t(hq + 2 * hkv) * D, cache = size_t(slots + 1) * hkv * capacity * D;
  const auto qkv = testing::random_vector(n * ld, 17);
  const auto bias = testing::random_vector(ld, 18, 0.1f);
  const auto q_norm = testing::random_vector(D, 19), k_norm = testing::random_vector(D, 20);
  std::vector<float> want_q(size_t(n) * hq * D), want_k(cache, NAN), want_v(cache, NAN);
  const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                        paged ? layout.table.data() : nullptr};
  cpu::qkv_rope_cache(want_q.data(), want_k.data(), want_v.data(), qkv.data(),
                      qwen3 ? nullptr : bias.data(), qwen3 ? q_norm.data() : nullptr,
                      qwen3 ? k_norm.data() : nullptr, rope.cos.data(), rope.sin.data(), host, n,
                      shape);
  float* q = up(std::vector<float>(want_q.size(), NAN));
  uint16_t* k = up(std::vector<uint16_t>(cache, kBf16NaN));
  uint16_t* v = up(std::vector<uint16_t>(cache, kBf16NaN));
  const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
  cuda::qkv_rope_cache(q, k, v, up(qkv), qwen3 ? nullptr : up(bias), qwen3 ? up(q_norm) : nullptr,
                       qwen3 ? up(k_norm) : nullptr, up(rope.cos), up(rope.sin), dev, n, shape,
                       stream_);
  EXPECT_LT(norm_relative(want_q, down(q, want_q.size())), kBf16Tol);
  // Only the rows' cache positions are written, and all of each.
  const auto got_k = down_bf16(k, cache), got_v = down_bf16(v, cache);
  std::vector<float> wk, gk, wv, gv;
  for (size_t i = 0; i < cache; ++i) {
    EXPECT_EQ(std::isnan(want_k[i]), std::isnan(got_k[i])) << "k cache element " << i;
    EXPECT_EQ(std::isnan(want_v[i]), std::isnan(got_v[i])) << "v cache element " << i;
    if (!std::isnan(want_k[i])) wk.push_back(want_k[i]), gk.push_back(got_k[i]);
    if (!std::isnan(want_v[i])) wv.push_back(want_v[i]), gv.push_back(got_v[i]);
  }
  EXPECT_EQ(wk.size(), size_t(n) * hkv * D);
  EXPECT_LT(norm_relative(wk, gk), kBf16Tol);
  EXPECT_LT(norm_relative(wv, gv), kBf16Tol);
  }
}

TEST_P(DecodeShapes, DecodeAttentionMatchesCachedAttentionRowByRow) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  (void)qwen3;
  for (bool paged : {false, true}) {
  SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
  // Long enough that rows at the far end take several of the kernel's
  // rounds of positions at every head size.
  const int slots = 5, capacity = 1040;
  Rows rows = decode_rows(slots, capacity);
  for (int p : {capacity - 1, 600, 129, 128, 127}) {
    rows.slots.push_back(int32_t(rows.slots.size() % slots)), rows.positions.push_back(p), rows.tokens.push_back(0);
  }
  const int n = static_cast<int>(rows.slots.size());
  const CacheLayout layout = cache_layout(paged, slots + 1, capacity);
  const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
  const size_t cache = size_t(slots + 1) * hkv * capacity * D;
  const auto k = rounded(testing::random_vector(cache, 21)), v = rounded(testing::random_vector(cache, 22));
  const auto q = testing::random_vector(size_t(n) * hq * D, 23);
  std::vector<float> want(q.size());
  const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                        paged ? layout.table.data() : nullptr};
  cpu::decode_attention(want.data(), q.data(), k.data(), v.data(), host, n, shape);
  const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
  const float* gq = up(q);
  const uint16_t *gk = up(to_bf16(k)), *gv = up(to_bf16(v));
  for (cuda::DecodeAttentionForm form : kAttentionForms) {
  SCOPED_TRACE(form_name(form));
  for (int splits : kAttentionSplits) {
    SCOPED_TRACE("splits " + std::to_string(splits));
    uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
    cuda::decode_attention(y, gq, gk, gv, dev, n, shape, attention_scratch(), stream_, splits, form);
    EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
  }
  }
  }
}

// The prefill form against the same reference: runs of prompt rows (whole
// tiles, partial ones, a chunk past a cached prefix at an unaligned
// position, a lone row, the cache's last positions) over random cache
// contents, every output row written.
TEST_P(DecodeShapes, PrefillAttentionMatchesCachedAttentionRowByRow) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  (void)qwen3;
  if (!cuda::prefill_attention_supports(D)) GTEST_SKIP() << "head_dim " << D << " takes decode attention";
  for (bool paged : {false, true}) {
  SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
  const int slots = 5, capacity = 1040;
  Rows rows;
  rows.add_run(0, 0, 300);
  rows.add_run(1, 301, 70);
  rows.add_run(2, 5, 1);
  rows.add_run(3, 0, 128);
  rows.add_run(4, capacity - 40, 40);
  const int n = static_cast<int>(rows.slots.size());
  std::vector<int32_t> tiles;
  prefill_attention_tiles(rows.slots.data(), rows.positions.data(), 0, n, tiles);
  const CacheLayout layout = cache_layout(paged, slots, capacity);
  const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
  const size_t cache = size_t(slots) * hkv * capacity * D;
  const auto k = rounded(testing::random_vector(cache, 51)), v = rounded(testing::random_vector(cache, 52));
  const auto q = testing::random_vector(size_t(n) * hq * D, 53);
  std::vector<float> want(q.size());
  const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                        paged ? layout.table.data() : nullptr};
  cpu::decode_attention(want.data(), q.data(), k.data(), v.data(), host, n, shape);
  const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
  const float* gq = up(q);
  const uint16_t *gk = up(to_bf16(k)), *gv = up(to_bf16(v));
  const int32_t* gtiles = up(tiles);
  const int tile_count = static_cast<int>(tiles.size() / 2);
  // Without the scratch (one block a tile and head), and with it: split over
  // the keys where the tiles are fewer blocks than the GPU has multiprocessors.
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split over the keys where few tiles" : "one block a tile and head");
    cuda::PrefillAttentionScratch scratch;
    if (split) scratch.partials = up(std::vector<float>(cuda::kPrefillScratchFloats, NAN));
    uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
    cuda::prefill_attention(y, gq, gk, gv, dev, gtiles, tile_count, shape, stream_, scratch, capacity);
    EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
  }
  // A short chunk far into the context alone: few blocks, so it splits.
  const int first = n - 40;  // slot 4's run at the cache's end
  std::vector<int32_t> last_tiles;
  prefill_attention_tiles(rows.slots.data(), rows.positions.data(), first, n, last_tiles);
  ASSERT_EQ(last_tiles.size(), 2u);
  EXPECT_GT(cuda::prefill_attention_splits(1, hq, capacity, true), 1);
  cuda::PrefillAttentionScratch scratch;
  scratch.partials = up(std::vector<float>(cuda::kPrefillScratchFloats, NAN));
  uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
  cuda::prefill_attention(y, gq, gk, gv, dev, up(last_tiles), 1, shape, stream_, scratch, capacity);
  const auto got = down_bf16(y, q.size());
  const size_t from = size_t(first) * hq * D;
  EXPECT_LT(norm_relative(std::vector<float>(want.begin() + from, want.end()),
                          std::vector<float>(got.begin() + from, got.end())),
            kBf16Tol);
  }
}

// The fused decode-step form against qkv_rope_cache then attention: one row
// per slot (as a decode step has), at positions from 0 to the far end of
// the cache, over earlier positions of random contents. The rows' K/V must
// land in the cache as qkv_rope_cache writes them.
TEST_P(DecodeShapes, FusedDecodeAttentionMatchesQkvRopeCacheThenAttention) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  for (bool paged : {false, true}) {
  SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
  const int capacity = 1040;
  Rows rows;
  for (int p : {0, 1, 127, 128, 600, capacity - 1}) {
    rows.slots.push_back(int32_t(rows.slots.size())), rows.positions.push_back(p), rows.tokens.push_back(0);
  }
  const int n = static_cast<int>(rows.slots.size()), slots = n;
  const CacheLayout layout = cache_layout(paged, slots, capacity);
  const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
  const RopeTable rope = rope_table(D, capacity);
  const size_t ld = size_t(hq + 2 * hkv) * D, cache = size_t(slots) * hkv * capacity * D;
  const auto qkv = testing::random_vector(n * ld, 41);
  const auto bias = testing::random_vector(ld, 42, 0.1f);
  const auto q_norm = testing::random_vector(D, 43), k_norm = testing::random_vector(D, 44);
  auto k = rounded(testing::random_vector(cache, 45)), v = rounded(testing::random_vector(cache, 46));
  const std::vector<uint16_t> k0 = to_bf16(k), v0 = to_bf16(v);
  const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                        paged ? layout.table.data() : nullptr};
  std::vector<float> q(size_t(n) * hq * D), want(q.size());
  const float* b = qwen3 ? nullptr : bias.data();
  const float* qn = qwen3 ? q_norm.data() : nullptr;
  const float* kn = qwen3 ? k_norm.data() : nullptr;
  cpu::qkv_rope_cache(q.data(), k.data(), v.data(), qkv.data(), b, qn, kn, rope.cos.data(),
                      rope.sin.data(), host, n, shape);
  // The kernel attends over the bf16 copy it writes.
  k = rounded(k), v = rounded(v);
  cpu::decode_attention(want.data(), q.data(), k.data(), v.data(), host, n, shape);
  const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
  for (cuda::DecodeAttentionForm form : kAttentionForms) {
  SCOPED_TRACE(form_name(form));
  for (int splits : kAttentionSplits) {
  SCOPED_TRACE("splits " + std::to_string(splits));
  uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
  uint16_t* gk = up(k0);
  uint16_t* gv = up(v0);
  cuda::decode_attention_fused(y, gk, gv, up(qkv), qwen3 ? nullptr : up(bias),
                               qwen3 ? up(q_norm) : nullptr, qwen3 ? up(k_norm) : nullptr,
                               up(rope.cos), up(rope.sin), dev, n, shape, attention_scratch(),
                               stream_, splits, form);
  EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
  // The rows' positions hold their K/V; every other element is untouched.
  std::vector<bool> written(cache, false);
  for (int r = 0; r < n; ++r) {
    for (int h = 0; h < hkv; ++h) {
      const size_t at = cache_offset(host, shape, rows.slots[r], h, rows.positions[r]);
      for (int d = 0; d < D; ++d) written[at + d] = true;
    }
  }
  const auto got_k = down_bf16(gk, cache), got_v = down_bf16(gv, cache);
  std::vector<float> wk, gk_rows, wv, gv_rows;
  size_t moved = 0;
  for (size_t i = 0; i < cache; ++i) {
    if (written[i]) {
      wk.push_back(k[i]), gk_rows.push_back(got_k[i]), wv.push_back(v[i]), gv_rows.push_back(got_v[i]);
    } else {
      moved += got_k[i] != k[i] || got_v[i] != v[i];
    }
  }
  EXPECT_EQ(wk.size(), size_t(n) * hkv * D);
  EXPECT_LT(norm_relative(wk, gk_rows), kBf16Tol);
  EXPECT_LT(norm_relative(wv, gv_rows), kBf16Tol);
  EXPECT_EQ(moved, 0u) << "cache elements outside the rows' positions changed";
  }
  }
  }
}

// The head sizes decode attention takes: 8-dim pieces whose count divides a
// warp (this runs everywhere; the engine refuses other sizes up front).
TEST(DecodeAttentionShapes, HeadSizesAreThoseWhosePiecesDivideAWarp) {
  for (int d : {8, 16, 32, 64, 128, 256}) EXPECT_TRUE(cuda::decode_attention_supports(d)) << d;
  for (int d : {4, 24, 48, 96, 192, 512}) EXPECT_FALSE(cuda::decode_attention_supports(d)) << d;
  // Without scratch every row is one split, whatever the rows.
  const DecodeShape shape{16, 8, 128, 4096, 1e-6f, 4};
  for (int n : {1, 8, 64, 1024}) EXPECT_EQ(cuda::decode_attention_splits(n, shape, false), 1) << n;
  // The tensor-core form takes head sizes 64 and 128, up to 8 query heads a
  // block, and by default launches of a block a multiprocessor or more
  // (1,024 rows x 8 blocks is more on any GPU); kLanes always runs the
  // lanes form.
  using Form = cuda::DecodeAttentionForm;
  for (int d : {64, 128}) {
    const DecodeShape tiled{16, 8, d, 4096, 1e-6f, 4};
    EXPECT_EQ(cuda::decode_attention_form(1024, tiled, Form::kAuto), Form::kTiles) << d;
    EXPECT_EQ(cuda::decode_attention_form(1, tiled, Form::kTiles), Form::kTiles) << d;
    EXPECT_EQ(cuda::decode_attention_form(1024, tiled, Form::kLanes), Form::kLanes) << d;
  }
  for (int d : {8, 16, 32, 256}) {
    const DecodeShape lanes_only{16, 8, d, 4096, 1e-6f, 4};
    EXPECT_EQ(cuda::decode_attention_form(1024, lanes_only, Form::kTiles), Form::kLanes) << d;
  }
  // COHORT_INFER_ATTENTION's names, and an error naming anything else.
  EXPECT_EQ(cuda::parse_decode_attention_form("lanes").value(), Form::kLanes);
  EXPECT_EQ(cuda::parse_decode_attention_form("tiles").value(), Form::kTiles);
  const auto bad = cuda::parse_decode_attention_form("tensor");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'tensor'"), std::string::npos) << bad.status().message();
}

// The CPU references agree between the layouts (this runs everywhere):
// rows written through a shuffled block table and attended through it give
// exactly what the contiguous cache gives.
TEST(DecodeCacheLayouts, ThePagedCpuReferenceEqualsTheContiguousOne) {
  const int hq = 8, hkv = 2, D = 32, slots = 3, capacity = 48;
  Rows rows;
  for (int s = 0; s < slots; ++s) {
    for (int p = 0; p < 20 + 9 * s; ++p) rows.slots.push_back(s), rows.positions.push_back(p);
  }
  rows.tokens.assign(rows.slots.size(), 0);
  const int n = static_cast<int>(rows.slots.size());
  const RopeTable rope = rope_table(D, capacity);
  const size_t ld = size_t(hq + 2 * hkv) * D, cache = size_t(slots) * hkv * capacity * D;
  const auto qkv = testing::random_vector(n * ld, 31);
  std::vector<float> y[2];
  for (int paged = 0; paged < 2; ++paged) {
    const CacheLayout layout = cache_layout(paged, slots, capacity);
    const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
    const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                          paged ? layout.table.data() : nullptr};
    std::vector<float> q(size_t(n) * hq * D), k(cache, NAN), v(cache, NAN);
    cpu::qkv_rope_cache(q.data(), k.data(), v.data(), qkv.data(), nullptr, nullptr, nullptr, rope.cos.data(),
                        rope.sin.data(), host, n, shape);
    y[paged].resize(q.size());
    cpu::decode_attention(y[paged].data(), q.data(), k.data(), v.data(), host, n, shape);
  }
  EXPECT_EQ(y[0], y[1]);
}

// Tiles break where the slot changes or a position does not follow, and
// every kPrefillTileRows rows of a run (this runs everywhere).
TEST(PrefillAttentionTiles, RunsAreCutAtSlotsGapsAndEveryTileOfRows) {
  constexpr int T = kPrefillTileRows;
  Rows rows;
  rows.add_run(0, 0, 2 * T + 2);  // two whole tiles and 2 rows
  rows.add_run(0, 3 * T, 3);      // the same slot, not following
  rows.add_run(1, 7, T);
  rows.add_run(2, 0, 1);
  std::vector<int32_t> tiles;
  prefill_attention_tiles(rows.slots.data(), rows.positions.data(), 0, int(rows.slots.size()), tiles);
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, T, T, T, 2 * T, 2, 2 * T + 2, 3, 2 * T + 5, T, 3 * T + 5, 1}));
  tiles.clear();
  prefill_attention_tiles(rows.slots.data(), rows.positions.data(), 60, 70, tiles);  // a range starts a run
  EXPECT_EQ(tiles, (std::vector<int32_t>{60, 10}));
}

// (q heads, kv heads, head_dim, Qwen3-style q/k norm instead of a qkv bias)
INSTANTIATE_TEST_SUITE_P(HeadLayouts, DecodeShapes,
                         ::testing::Values(std::make_tuple(4, 4, 64, false),
                                           std::make_tuple(8, 2, 128, true),
                                           std::make_tuple(16, 8, 32, true),
                                           std::make_tuple(16, 2, 64, true),
                                           std::make_tuple(2, 1, 256, false)));

TEST_F(DecodeOpsParity, RowArgmaxAndMergeMatchTheCpuPickAcrossVocabShards) {
  const int n = 13, tp = 3, shard = 700;
  std::vector<std::vector<float>> logits(tp);
  for (int k = 0; k < tp; ++k) logits[k] = testing::random_vector(size_t(n) * shard, 24 + k);
  logits[2][5 * shard + 10] = logits[0][5 * shard + 3] = 50.0f;  // a tie across shards
  logits[1][7 * shard + 20] = logits[1][7 * shard + 600] = 60.0f;  // a tie within one
  std::vector<float> want_pairs(size_t(tp) * n * 2), got_pairs(want_pairs.size(), NAN);
  for (int k = 0; k < tp; ++k) {
    cpu::row_argmax(want_pairs.data() + size_t(k) * n * 2, logits[k].data(), n, shard, k * shard);
    float* out = up(std::vector<float>(size_t(n) * 2, NAN));
    cuda::row_argmax(out, up(logits[k]), n, shard, k * shard, stream_);
    const auto got = down(out, size_t(n) * 2);
    std::copy(got.begin(), got.end(), got_pairs.begin() + size_t(k) * n * 2);
  }
  EXPECT_EQ(0, std::memcmp(want_pairs.data(), got_pairs.data(), want_pairs.size() * 4));
  std::vector<int32_t> want(n);
  cpu::merge_argmax(want.data(), want_pairs.data(), tp, n);
  int32_t* tokens = up(std::vector<int32_t>(n, -1));
  cuda::merge_argmax(tokens, up(want_pairs), tp, n, stream_);
  std::vector<int32_t> got(n);
  gpu_->copy_to_host(got.data(), tokens, n * sizeof(int32_t));
  EXPECT_EQ(want, got);
  EXPECT_EQ(want[5], 3);
  EXPECT_EQ(want[7], shard + 20);
}

// Rows as wide as a real vocabulary take the 16-byte path; ties keep the
// lowest index wherever the copies fall.
TEST_F(DecodeOpsParity, RowArgmaxOverAFullVocabularyKeepsTheFirstMaximum) {
  const int n = 4, V = 151936;
  auto logits = testing::random_vector(size_t(n) * V, 12);
  logits[0 * size_t(V) + 151935] = 30.0f;
  logits[1 * size_t(V) + 7] = logits[1 * size_t(V) + 150001] = 40.0f;
  logits[2 * size_t(V) + 1026] = logits[2 * size_t(V) + 1027] = 41.0f;  // one 16-byte piece
  std::vector<float> want(size_t(n) * 2);
  cpu::row_argmax(want.data(), logits.data(), n, V, 0);
  float* out = up(std::vector<float>(want.size(), NAN));
  int32_t* tokens = up(std::vector<int32_t>(n, -1));
  cuda::row_argmax(out, up(logits), n, V, 0, stream_, tokens);
  const auto got = down(out, want.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
  // The one-rank form writes the picks as tokens too.
  std::vector<int32_t> picked(n), merged(n);
  gpu_->copy_to_host(picked.data(), tokens, n * sizeof(int32_t));
  cpu::merge_argmax(merged.data(), want.data(), 1, n);
  EXPECT_EQ(picked, merged);
  int32_t index = 0;
  std::memcpy(&index, &got[3], 4);
  EXPECT_EQ(index, 7);
  std::memcpy(&index, &got[5], 4);
  EXPECT_EQ(index, 1026);
}

// A step launched ahead takes some rows' tokens from the previous step's
// picks on the device, the others as staged.
TEST_F(DecodeOpsParity, TakeTokensFillsTheRowsThePreviousStepFeeds) {
  const int n = 300;
  std::vector<int32_t> previous(n), source(n), rows(n);
  for (int b = 0; b < n; ++b) {
    previous[b] = 1000 + 7 * b;
    rows[b] = b % 5 == 0 ? 0 : 50 + b;
    source[b] = b % 5 == 0 ? (b * 37) % n : -1;
  }
  std::vector<int32_t> want = rows;
  cpu::take_tokens(want.data(), previous.data(), source.data(), n);
  int32_t* dev = up(rows);
  cuda::take_tokens(dev, up(previous), up(source), n, stream_);
  std::vector<int32_t> got(n);
  gpu_->copy_to_host(got.data(), dev, n * sizeof(int32_t));
  EXPECT_EQ(want, got);
  EXPECT_EQ(want[5], previous[(5 * 37) % n]);
  EXPECT_EQ(want[6], 56);
}

}  // namespace
}  // namespace cohort::models
