// NF4 with double-quantized block scales (definition in nf4.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "models/quant/formats.h"
#include "models/quant/nf4.h"

#include "base/parallel_for.h"

namespace cohort::models::quant {

const std::array<float, 256>& dynamic_map() {
  static const std::array<float, 256> map = [] {
    std::vector<double> values;
    // Exponent i gives 2^i values: the midpoints of linspace(0.1, 1, 2^i + 1)
    // times 10^(i - 6), and their negatives (7 exponents, 127 of each sign).
    for (int i = 0; i < 7; ++i) {
      const int boundaries = (1 << i) + 1;
      const double step = 0.9 / (boundaries - 1), magnitude = std::pow(10.0, i - 6);
      for (int j = 0; j + 1 < boundaries; ++j) {
        const double mean = ((0.1 + j * step) + (0.1 + (j + 1) * step)) / 2.0;
        values.push_back(magnitude * mean);
        values.push_back(-magnitude * mean);
      }
    }
    values.push_back(0.0);
    values.push_back(1.0);
    std::sort(values.begin(), values.end());
    std::array<float, 256> out{};
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(values[i]);
    return out;
  }();
  return map;
}

int nearest_index(const float* table, int size, float x) {
  if (size <= 32) {
    int best = 0;
    float best_distance = std::fabs(x - table[0]);
    for (int i = 1; i < size; ++i) {
      const float d = std::fabs(x - table[i]);
      if (d < best_distance) best = i, best_distance = d;
    }
    return best;
  }
  // A long table (dynamic_map()'s 256, once per NF4 block: 10^7 a layer of
  // a 70B model) by bisection. It ascends, so |x - t| (rounded, hence
  // monotone in t) falls up to the last entry below x and rises from the
  // first at or above it: the nearest is one of those two, then the first
  // of any equal distances before it, as the scan above finds.
  if (x != x) return 0;  // NaN: no distance is smaller than the first's
  const int above = static_cast<int>(std::lower_bound(table, table + size, x) - table);
  int best = above == size ? size - 1 : above;
  if (above > 0 && above < size && std::fabs(x - table[above - 1]) <= std::fabs(x - table[above])) best = above - 1;
  const float distance = std::fabs(x - table[best]);
  while (best > 0 && std::fabs(x - table[best - 1]) == distance) --best;
  return best;
}

namespace detail {
namespace {

// nearest_index(kNf4Levels, 16, x) for each of x[0, count) in [-1, 1],
// without scanning all 16 levels (a 70B model quantizes some 10^11 values
// at load): the count of midpoints below x, which a rounding of x at a
// midpoint can put one level off, then the scan's own comparisons with the
// two neighbours. The counts are a loop of their own, which the compiler
// vectorises; the neighbours' lookups are not.
void nf4_levels(const float* x, int count, int* q) {
  static const std::array<float, 15> midpoints = [] {
    std::array<float, 15> m{};
    for (int i = 0; i < 15; ++i) m[size_t(i)] = (kNf4Levels[i] + kNf4Levels[i + 1]) / 2;
    return m;
  }();
  for (int j = 0; j < count; ++j) {
    int c = 0;
    for (int i = 0; i < 15; ++i) c += x[j] > midpoints[size_t(i)] ? 1 : 0;
    q[j] = c;
  }
  for (int j = 0; j < count; ++j) {
    const float v = x[j];
    const int c = q[j];
    const auto distance = [v](int i) { return std::fabs(v - kNf4Levels[i]); };
    if (c > 0 && distance(c - 1) <= distance(c)) {
      q[j] = c - 1;
    } else if (c < 15 && distance(c + 1) < distance(c)) {
      q[j] = c + 1;
    }
  }
}

constexpr int kZeroLevel = 7;      // kNf4Levels[7] == 0
constexpr int kDynamicZero = 127;  // dynamic_map()[127] == 0

int64_t element_count(const QuantizedWeight& w) {
  return w.rows * w.cols;
}

inline int code_at(const PackedWeightView& w, int64_t e) {
  const uint8_t byte = w.packed[size_t(e / 2)];
  return e % 2 == 0 ? byte >> 4 : byte & 0xf;
}

// The dequantized absmax of NF4 block b.
inline float block_absmax(const PackedWeightView& w, int64_t b) {
  return dynamic_map()[w.nf4_absmax_codes[b]] * w.nf4_absmax_scales[b / kNf4AbsmaxBlock] +
         w.nf4_absmax_offset;
}

}  // namespace

Status validate_nf4(const QuantizedWeight& w) {
  if (w.bits != 4) return weight_error(w, "NF4 is 4-bit; bits is " + std::to_string(w.bits));
  if (w.group_size <= 0) return weight_error(w, "the NF4 block size must be positive");
  const int64_t n = element_count(w), blocks = ceil_div(n, w.group_size);
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "the packed codes (bytes)", w.packed.size(), size_t(ceil_div(n, 2))));
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "the absmax codes", w.nf4_absmax.codes.size(), size_t(blocks)));
  return expect_count(w, "the absmax scales", w.nf4_absmax.scales.size(),
                      size_t(ceil_div(blocks, kNf4AbsmaxBlock)));
}

float nf4_block_scale(const PackedWeightView& w, int64_t block) {
  return block_absmax(w, block);
}

void dequantize_nf4_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                         float* out) {
  const int64_t first = row_begin * w.cols, last = row_end * w.cols;
  int64_t cached_block = -1;
  float absmax = 0.0f;
  for (int64_t e = first; e < last; ++e) {
    const int64_t b = e / w.group_size;
    if (b != cached_block) absmax = block_absmax(w, b), cached_block = b;
    out[e - first] = kNf4Levels[code_at(w, e)] * absmax;
  }
}

Result<QuantizedWeight> quantize_nf4_weight(const std::string& name, const float* x, int64_t rows,
                                            int64_t cols, int64_t block) {
  QuantizedWeight w;
  w.format = WeightFormat::kNf4;
  w.name = name;
  w.rows = rows, w.cols = cols, w.bits = 4;
  w.group_size = block;
  if (block <= 0) return weight_error(w, "the NF4 block size must be positive");
  const int64_t n = rows * cols, blocks = ceil_div(n, block);
  w.packed.assign(size_t(ceil_div(n, 2)), 0);
  std::vector<float> absmax(static_cast<size_t>(blocks));
  uint8_t* const packed = w.packed.data();
  auto quantize_block = [&](int64_t b) {
    const int64_t e0 = b * block, e1 = std::min(n, e0 + block);
    float a = 0.0f;
    for (int64_t e = e0; e < e1; ++e) a = std::max(a, std::fabs(x[e]));
    absmax[size_t(b)] = a;
    // The block's codes a chunk at a time, then packed two a byte, each
    // whole byte written once.
    constexpr int kChunk = 64;
    float scaled[kChunk];
    int codes[kChunk];
    for (int64_t c0 = e0; c0 < e1; c0 += kChunk) {
      const int count = static_cast<int>(std::min<int64_t>(kChunk, e1 - c0));
      if (a > 0.0f) {
        for (int j = 0; j < count; ++j) scaled[j] = std::clamp(x[c0 + j] / a, -1.0f, 1.0f);
        nf4_levels(scaled, count, codes);
      } else {
        std::fill(codes, codes + count, kZeroLevel);
      }
      uint8_t* bytes = packed + c0 / 2;  // the byte element c0 is in
      int j = 0;
      if (c0 % 2 == 1) *bytes++ |= static_cast<uint8_t>(codes[j++]);
      for (; j + 1 < count; j += 2) *bytes++ = static_cast<uint8_t>(codes[j] << 4 | codes[j + 1]);
      if (j < count) *bytes |= static_cast<uint8_t>(codes[j] << 4);
    }
  };
  // Blocks are independent and, of an even size, own whole bytes: a large
  // weight (a 70B model's projections are 10^8 values) spreads over the
  // cores, with the same result.
  constexpr int64_t kBlocksPerTask = 4096;
  if (block % 2 == 0 && blocks > kBlocksPerTask) {
    parallel_for(size_t(ceil_div(blocks, kBlocksPerTask)), [&](size_t t) {
      const int64_t b0 = int64_t(t) * kBlocksPerTask, b1 = std::min(blocks, b0 + kBlocksPerTask);
      for (int64_t b = b0; b < b1; ++b) quantize_block(b);
    });
  } else {
    for (int64_t b = 0; b < blocks; ++b) quantize_block(b);
  }
  // Double quantization of the absmax: around their mean, 8-bit dynamic
  // codes in blocks of 256, each block scaled by its own absmax.
  double sum = 0.0;
  for (float a : absmax) sum += a;
  Nf4Absmax& stats = w.nf4_absmax;
  stats.offset = static_cast<float>(sum / static_cast<double>(blocks));
  stats.codes.resize(size_t(blocks));
  stats.scales.resize(size_t(ceil_div(blocks, kNf4AbsmaxBlock)));
  const std::array<float, 256>& map = dynamic_map();
  // Each block of 256 absmax values on its own: over the cores.
  parallel_for(
      stats.scales.size(), [&](size_t s) {
    const size_t b0 = s * kNf4AbsmaxBlock, b1 = std::min(size_t(blocks), b0 + kNf4AbsmaxBlock);
    float a2 = 0.0f;
    for (size_t b = b0; b < b1; ++b) a2 = std::max(a2, std::fabs(absmax[b] - stats.offset));
    stats.scales[s] = a2;
    for (size_t b = b0; b < b1; ++b) {
      const float centred = absmax[b] - stats.offset;
      stats.codes[b] = static_cast<uint8_t>(
          a2 > 0.0f ? nearest_index(map.data(), 256, std::clamp(centred / a2, -1.0f, 1.0f))
                    : kDynamicZero);
    }
      },
      stats.scales.size() >= 16 ? 0 : 1);
  return w;
}

}  // namespace detail
}  // namespace cohort::models::quant
