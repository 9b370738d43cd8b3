// The fp8 KV cache's kernels (models/ops/kv_fp8.h): qkv_rope_cache writing
// e4m3 codes and each head's largest value, and decode attention (both
// forms, fused and not) and prefill attention reading them, against the CPU
// references run on the values the codes stand for (kv_fp8_decode). The
// scales differ per head and between K and V, so a kernel that takes the
// wrong head's scale or none fails. Skips with a message where no GPU is
// visible.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "models/ops/decode_attention.h"
#include "models/ops/kv_fp8.h"
#include "models/ops/prefill_attention.h"
#include "models/ops/rope.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers

constexpr uint8_t kFp8NaN = 0x7f;

// Per-head scales, K's then V's: powers of two that differ by head.
std::vector<float> head_scales(int hkv) {
  std::vector<float> s;
  for (int h = 0; h < hkv; ++h) s.push_back(std::ldexp(1.0f, (h % 3) - 1));  // K: 1/2, 1, 2, ...
  for (int h = 0; h < hkv; ++h) s.push_back(std::ldexp(1.0f, -(h % 4) - 2));  // V: 1/4, 1/8, ...
  return s;
}

// A cache of random values, quantized: the codes, and the values they stand for.
struct Fp8Cache {
  std::vector<uint8_t> k_codes, v_codes;
  std::vector<float> k, v;
};
// Values up to `reach` times their head's scale (200: most of e4m3's
// range, the small ones in its subnormals).
Fp8Cache random_fp8_cache(size_t elements, int hkv, int D, const std::vector<float>& scales,
                          const DecodeRows& host, const DecodeShape& shape, int slots, uint32_t seed,
                          float reach = 200.0f) {
  auto k = testing::random_vector(elements, seed), v = testing::random_vector(elements, seed + 1);
  Fp8Cache c;
  c.k_codes.resize(elements), c.v_codes.resize(elements), c.k.resize(elements), c.v.resize(elements);
  // Each element's head from its offset: visit every (slot, head, position).
  for (int slot = 0; slot < slots; ++slot) {
    for (int h = 0; h < hkv; ++h) {
      for (int p = 0; p < shape.capacity; ++p) {
        const size_t at = cache_offset(host, shape, slot, h, p);
        for (int d = 0; d < D; ++d) k[at + d] *= reach * scales[h], v[at + d] *= reach * scales[hkv + h];
        kv_fp8_encode(k.data() + at, D, scales[h], c.k_codes.data() + at);
        kv_fp8_encode(v.data() + at, D, scales[hkv + h], c.v_codes.data() + at);
        kv_fp8_decode(c.k_codes.data() + at, D, scales[h], c.k.data() + at);
        kv_fp8_decode(c.v_codes.data() + at, D, scales[hkv + h], c.v.data() + at);
      }
    }
  }
  return c;
}

class KvFp8Parity : public DecodeOpsParity,
                    public ::testing::WithParamInterface<std::tuple<int, int, int, bool>> {
 protected:
  std::vector<uint8_t> down_codes(const uint8_t* p, size_t n) {
    std::vector<uint8_t> v(n);
    gpu_->copy_to_host(v.data(), p, n);
    return v;
  }
};

TEST_P(KvFp8Parity, QkvRopeCacheWritesEachValuesCodeAndEachHeadsLargestValue) {
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
    const auto qkv = testing::random_vector(n * ld, 17, 8.0f);
    const auto bias = testing::random_vector(ld, 18, 0.1f);
    const auto q_norm = testing::random_vector(D, 19), k_norm = testing::random_vector(D, 20);
    std::vector<float> want_q(size_t(n) * hq * D), want_k(cache, NAN), want_v(cache, NAN);
    const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                          paged ? layout.table.data() : nullptr};
    cpu::qkv_rope_cache(want_q.data(), want_k.data(), want_v.data(), qkv.data(), qwen3 ? nullptr : bias.data(),
                        qwen3 ? q_norm.data() : nullptr, qwen3 ? k_norm.data() : nullptr, rope.cos.data(),
                        rope.sin.data(), host, n, shape);
    const std::vector<float> scales = head_scales(hkv);
    float* q = up(std::vector<float>(want_q.size(), NAN));
    uint8_t* k = up(std::vector<uint8_t>(cache, kFp8NaN));
    uint8_t* v = up(std::vector<uint8_t>(cache, kFp8NaN));
    float* amax = up(std::vector<float>(2 * size_t(hkv), 0.0f));
    const KvView view{k, v, up(scales), amax};
    const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
    cuda::qkv_rope_cache(q, view, up(qkv), qwen3 ? nullptr : up(bias), qwen3 ? up(q_norm) : nullptr,
                         qwen3 ? up(k_norm) : nullptr, up(rope.cos), up(rope.sin), dev, n, shape, stream_);
    EXPECT_LT(norm_relative(want_q, down(q, want_q.size())), kBf16Tol);
    const auto got_k = down_codes(k, cache), got_v = down_codes(v, cache);
    const auto got_amax = down(amax, 2 * size_t(hkv));
    // Only the rows' positions are written; each code is the reference
    // value's (a value on a rounding boundary may land one code over).
    std::vector<float> want_amax(2 * size_t(hkv), 0.0f);
    std::vector<float> wk, gk, wv, gv, qk, qv;  // reference, kernel's codes, reference's codes
    size_t exact = 0, written = 0;
    for (int slot = 0; slot <= slots; ++slot) {
      for (int h = 0; h < hkv; ++h) {
        for (int p = 0; p < capacity; ++p) {
          const size_t at = cache_offset(host, shape, slot, h, p);
          for (int d = 0; d < D; ++d) {
            const size_t i = at + d;
            const bool was_written = !std::isnan(want_k[i]);
            ASSERT_EQ(was_written, got_k[i] != kFp8NaN) << "k element " << i;
            ASSERT_EQ(was_written, got_v[i] != kFp8NaN) << "v element " << i;
            if (!was_written) continue;
            ++written;
            uint8_t code_k = 0, code_v = 0;
            kv_fp8_encode(&want_k[i], 1, scales[h], &code_k);
            kv_fp8_encode(&want_v[i], 1, scales[hkv + h], &code_v);
            exact += (code_k == got_k[i]) + (code_v == got_v[i]);
            float value = 0;
            kv_fp8_decode(&code_k, 1, scales[h], &value);
            qk.push_back(value);
            kv_fp8_decode(&code_v, 1, scales[hkv + h], &value);
            qv.push_back(value);
            kv_fp8_decode(&got_k[i], 1, scales[h], &value);
            wk.push_back(want_k[i]), gk.push_back(value);
            kv_fp8_decode(&got_v[i], 1, scales[hkv + h], &value);
            wv.push_back(want_v[i]), gv.push_back(value);
            want_amax[h] = std::max(want_amax[h], std::fabs(want_k[i]));
            want_amax[hkv + h] = std::max(want_amax[hkv + h], std::fabs(want_v[i]));
          }
        }
      }
    }
    EXPECT_EQ(written, size_t(n) * hkv * D);
    EXPECT_GT(double(exact), 0.99 * 2.0 * double(written)) << "codes equal to the reference's";
    // The values the kernel's codes stand for are as close to the reference
    // values as the reference's own codes (up to the codes one over), and
    // those are e4m3's rounding: within 1/16 for normal values, more for
    // values down in e4m3's subnormal range at these heads' fixed scales.
    EXPECT_LT(norm_relative(qk, gk), 0.01);
    EXPECT_LT(norm_relative(qv, gv), 0.01);
    EXPECT_LT(norm_relative(wk, gk), norm_relative(wk, qk) + 0.01);
    EXPECT_LT(norm_relative(wv, gv), norm_relative(wv, qv) + 0.01);
    EXPECT_LT(norm_relative(wk, gk), 0.15);
    EXPECT_LT(norm_relative(wv, gv), 0.15);
    for (int h = 0; h < 2 * hkv; ++h) {
      EXPECT_NEAR(got_amax[h], want_amax[h], 1e-4 * want_amax[h]) << (h < hkv ? "K" : "V") << " head " << h % hkv;
    }
  }
}

TEST_P(KvFp8Parity, DecodeAttentionReadsTheValuesTheCodesStandFor) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  (void)qwen3;
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
    const int slots = 5, capacity = 1040;
    Rows rows = decode_rows(slots, capacity);
    for (int p : {capacity - 1, 600, 129, 128, 127}) {
      rows.slots.push_back(int32_t(rows.slots.size() % slots)), rows.positions.push_back(p), rows.tokens.push_back(0);
    }
    const int n = static_cast<int>(rows.slots.size());
    const CacheLayout layout = cache_layout(paged, slots + 1, capacity);
    const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
    const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                          paged ? layout.table.data() : nullptr};
    const size_t cache = size_t(slots + 1) * hkv * capacity * D;
    const std::vector<float> scales = head_scales(hkv);
    const Fp8Cache c = random_fp8_cache(cache, hkv, D, scales, host, shape, slots + 1, 21);
    // Queries scaled so that the scores stay within a unit or so, as the bf16
    // tests' are: the tile forms round q to bf16, whose error grows with the scores.
    const auto q = testing::random_vector(size_t(n) * hq * D, 23, 0.01f);
    std::vector<float> want(q.size());
    cpu::decode_attention(want.data(), q.data(), c.k.data(), c.v.data(), host, n, shape);
    const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
    const KvView view{up(c.k_codes), up(c.v_codes), up(scales), nullptr};
    const float* gq = up(q);
    for (cuda::DecodeAttentionForm form : kAttentionForms) {
      SCOPED_TRACE(form_name(form));
      for (int splits : {1, 0, 7}) {
        SCOPED_TRACE("splits " + std::to_string(splits));
        uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
        cuda::decode_attention(y, gq, view, dev, n, shape, attention_scratch(), stream_, splits, form);
        EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
      }
    }
  }
}

TEST_P(KvFp8Parity, PrefillAttentionReadsTheValuesTheCodesStandFor) {
  const auto [hq, hkv, D, qwen3] = GetParam();
  (void)qwen3;
  if (!cuda::prefill_attention_supports(D)) GTEST_SKIP() << "head_dim " << D << " takes decode attention";
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged cache" : "contiguous cache");
    // A whole number of 16-position blocks: the paged layout gives each slot
    // ceil(capacity / 16) blocks, which must fit the cache allocated below.
    const int slots = 3, capacity = 528;
    Rows rows;
    rows.add_run(0, 0, 200);
    rows.add_run(1, 301, 70);
    rows.add_run(2, capacity - 40, 40);
    const int n = static_cast<int>(rows.slots.size());
    std::vector<int32_t> tiles;
    prefill_attention_tiles(rows.slots.data(), rows.positions.data(), 0, n, tiles);
    const CacheLayout layout = cache_layout(paged, slots, capacity);
    const DecodeShape shape{hq, hkv, D, capacity, 1e-6f, layout.block_shift};
    const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                          paged ? layout.table.data() : nullptr};
    const size_t cache = size_t(slots) * hkv * capacity * D;
    const std::vector<float> scales = head_scales(hkv);
    const Fp8Cache c = random_fp8_cache(cache, hkv, D, scales, host, shape, slots, 51);
    const auto q = testing::random_vector(size_t(n) * hq * D, 53, 0.01f);
    std::vector<float> want(q.size());
    cpu::decode_attention(want.data(), q.data(), c.k.data(), c.v.data(), host, n, shape);
    const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
    const KvView view{up(c.k_codes), up(c.v_codes), up(scales), nullptr};
    for (bool split : {false, true}) {
      SCOPED_TRACE(split ? "split over the keys where few tiles" : "one block a tile and head");
      cuda::PrefillAttentionScratch scratch;
      if (split) scratch.partials = up(std::vector<float>(cuda::kPrefillScratchFloats, NAN));
      uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
      cuda::prefill_attention(y, up(q), view, dev, up(tiles), static_cast<int>(tiles.size() / 2), shape, stream_,
                              scratch, capacity);
      EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
    }
  }
}

// The fused decode step over an fp8 cache: the rows' K/V land as codes
// (those qkv_rope_cache would write), and attention uses them as read back,
// the row's own position included.
TEST_P(KvFp8Parity, FusedDecodeAttentionWritesCodesAndAttendsOverTheirValues) {
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
    const DecodeRows host{rows.tokens.data(), rows.slots.data(), rows.positions.data(),
                          paged ? layout.table.data() : nullptr};
    const RopeTable rope = rope_table(D, capacity);
    const size_t ld = size_t(hq + 2 * hkv) * D, cache = size_t(slots) * hkv * capacity * D;
    const auto qkv = testing::random_vector(n * ld, 41, 0.5f);
    const auto bias = testing::random_vector(ld, 42, 0.1f);
    const auto q_norm = testing::random_vector(D, 43), k_norm = testing::random_vector(D, 44);
    const std::vector<float> scales = head_scales(hkv);
    // Cached values of the size of the rows' own (as the bf16 test's).
    Fp8Cache c = random_fp8_cache(cache, hkv, D, scales, host, shape, slots, 45, 1.0f);
    const std::vector<uint8_t> k0 = c.k_codes, v0 = c.v_codes;
    std::vector<float> q(size_t(n) * hq * D), want(q.size());
    const float* b = qwen3 ? nullptr : bias.data();
    const float* qn = qwen3 ? q_norm.data() : nullptr;
    const float* kn = qwen3 ? k_norm.data() : nullptr;
    cpu::qkv_rope_cache(q.data(), c.k.data(), c.v.data(), qkv.data(), b, qn, kn, rope.cos.data(), rope.sin.data(),
                        host, n, shape);
    // The rows' new K/V as the codes hold them.
    std::vector<bool> written(cache, false);
    for (int r = 0; r < n; ++r) {
      for (int h = 0; h < hkv; ++h) {
        const size_t at = cache_offset(host, shape, rows.slots[r], h, rows.positions[r]);
        for (int d = 0; d < D; ++d) written[at + d] = true;
        for (auto [values, scale] : {std::pair{&c.k, scales[h]}, std::pair{&c.v, scales[hkv + h]}}) {
          std::vector<uint8_t> codes(D);
          kv_fp8_encode(values->data() + at, D, scale, codes.data());
          kv_fp8_decode(codes.data(), D, scale, values->data() + at);
        }
      }
    }
    cpu::decode_attention(want.data(), q.data(), c.k.data(), c.v.data(), host, n, shape);
    const DecodeRows dev{up(rows.tokens), up(rows.slots), up(rows.positions), paged ? up(layout.table) : nullptr};
    const float* gscales = up(scales);
    for (cuda::DecodeAttentionForm form : kAttentionForms) {
      SCOPED_TRACE(form_name(form));
      for (int splits : {1, 0, 7}) {
        SCOPED_TRACE("splits " + std::to_string(splits));
        uint16_t* y = up(std::vector<uint16_t>(q.size(), kBf16NaN));
        uint8_t* gk = up(k0);
        uint8_t* gv = up(v0);
        cuda::decode_attention_fused(y, KvView{gk, gv, gscales, nullptr}, up(qkv), qwen3 ? nullptr : up(bias),
                                     qwen3 ? up(q_norm) : nullptr, qwen3 ? up(k_norm) : nullptr, up(rope.cos),
                                     up(rope.sin), dev, n, shape, attention_scratch(), stream_, splits, form);
        EXPECT_LT(norm_relative(want, down_bf16(y, want.size())), kBf16Tol);
        const auto got_k = down_codes(gk, cache), got_v = down_codes(gv, cache);
        std::vector<float> wk, gkv, wv, gvv;
        size_t moved = 0;
        for (int slot = 0; slot < slots; ++slot) {
          for (int h = 0; h < hkv; ++h) {
            for (int p = 0; p < capacity; ++p) {
              const size_t at = cache_offset(host, shape, slot, h, p);
              for (int d = 0; d < D; ++d) {
                const size_t i = at + d;
                if (!written[i]) {
                  moved += got_k[i] != k0[i] || got_v[i] != v0[i];
                  continue;
                }
                float value = 0;
                kv_fp8_decode(&got_k[i], 1, scales[h], &value);
                wk.push_back(c.k[i]), gkv.push_back(value);
                kv_fp8_decode(&got_v[i], 1, scales[hkv + h], &value);
                wv.push_back(c.v[i]), gvv.push_back(value);
              }
            }
          }
        }
        EXPECT_EQ(wk.size(), size_t(n) * hkv * D);
        EXPECT_LT(norm_relative(wk, gkv), kBf16Tol);
        EXPECT_LT(norm_relative(wv, gvv), kBf16Tol);
        EXPECT_EQ(moved, 0u) << "cache elements outside the rows' positions changed";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadLayouts, KvFp8Parity,
                         ::testing::Values(std::make_tuple(4, 4, 64, false), std::make_tuple(8, 2, 128, true),
                                           std::make_tuple(16, 8, 32, true), std::make_tuple(2, 1, 256, false)));

}  // namespace
}  // namespace cohort::models
