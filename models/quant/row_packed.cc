// RowPackedWeight (row_packed.h). The codes and zero points come out of each
// format's own reference dequantizer run on altered views, so the bit
// layouts of GPTQ, AWQ and cohort's int4 are defined once (formats.h):
// with every scale 1 the dequantizer yields q - z exactly (small integers),
// and with the packed values zeroed it yields -z. e4m3 codes are the bytes
// themselves, and their scales those the dequantizer multiplies them by
// (detail::fp8_scale_at); NF4's are the block absmax it multiplies the
// levels by (detail::nf4_block_scale).
#include "models/quant/row_packed.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "models/quant/fp8_e4m3.h"
#include "models/quant/formats.h"
#include "models/quant/nf4.h"

namespace cohort::models::quant {
namespace {

using detail::ceil_div;
using detail::for_row_chunks;
using detail::weight_error;

constexpr uint8_t kE4m3One = 0x38;

// Columns one 16-byte load of codes covers: groups and widths are made of them.
int64_t load_columns(CodeKind kind) { return 16 * 8 / code_bits(kind); }

Status check_shape(const QuantizedWeight& w, CodeKind kind, int64_t group) {
  const int64_t unit = load_columns(kind);
  if (w.cols % unit != 0 || group % unit != 0) {
    return weight_error(w, "the row layout needs in_features and the group (" + std::to_string(group) +
                               ") to be multiples of " + std::to_string(unit) + " columns");
  }
  return Status::ok();
}

// Integer formats: q - z from a view with unit scales, -z from one whose
// values are zero, the scale from the format's own array.
Result<RowPackedWeight> pack_integer(const QuantizedWeight& w, int64_t group, int offset) {
  RowPackedWeight out;
  out.kind = w.bits == 4 ? CodeKind::kUint4 : CodeKind::kUint8;
  out.rows = w.rows, out.cols = w.cols, out.group = group;
  COHORT_RETURN_IF_ERROR(check_shape(w, out.kind, group));
  const int64_t groups = out.groups();
  out.codes.assign(size_t(w.rows * out.row_bytes()), 0);
  out.scales.resize(size_t(w.rows * groups));
  out.zeros.resize(size_t(w.rows * groups));
  const bool transposed = w.format == WeightFormat::kGptq || w.format == WeightFormat::kAwq;
  std::vector<float> ones(w.scales.size(), 1.0f);
  std::vector<uint8_t> no_values(transposed ? w.packed.size() : 0, 0);  // only GPTQ and AWQ read zeros
  PackedWeightView centred = view_of(w), zeros = view_of(w);
  centred.scales = ones.data();
  zeros.scales = ones.data(), zeros.packed = no_values.data();
  const int levels = 1 << w.bits;
  // Row chunks in parallel; the first bad value in row order is the error.
  std::vector<std::pair<int64_t, Status>> bad;
  std::mutex bad_mutex;
  for_row_chunks(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    std::vector<float> value(size_t(w.cols)), minus_zero(size_t(w.cols));
    for (int64_t n = r0; n < r1; ++n) {
      dequantize_view_rows(centred, n, n + 1, value.data());
      if (transposed) dequantize_view_rows(zeros, n, n + 1, minus_zero.data());
      // The row's bytes through a local pointer: a byte store may alias
      // anything reached through `out`, read again each element otherwise.
      uint8_t* const row_codes = out.codes.data() + n * out.row_bytes();
      const bool nibbles = code_bits(out.kind) == 4;
      for (int64_t k = 0; k < w.cols; ++k) {
        const int64_t g = k / group;
        // Signed formats have no stored zero: the code is shifted by `offset`.
        const int zero = transposed ? int(-minus_zero[size_t(k)]) : offset;
        const int code = int(value[size_t(k)]) + zero;
        if (code < 0 || code >= levels || zero < 0 || zero > levels) {
          std::lock_guard<std::mutex> lock(bad_mutex);
          bad.emplace_back(n, weight_error(w, "the value at [" + std::to_string(n) + ", " + std::to_string(k) +
                                                  "] has no " + std::to_string(w.bits) + "-bit code"));
          return;
        }
        if (nibbles) {
          row_codes[k / 2] |= uint8_t(k % 2 == 0 ? code : code << 4);  // the row starts zeroed
        } else {
          row_codes[k] = uint8_t(code);
        }
        if (k % group == 0) {
          out.zeros[size_t(n * groups + g)] = float(zero);
          out.scales[size_t(n * groups + g)] =
              transposed ? w.scales[size_t(g * w.rows + n)] : w.scales[size_t(n * groups + g)];
        }
      }
    }
  });
  if (!bad.empty()) return std::min_element(bad.begin(), bad.end(), [](const auto& a, const auto& b) {
                             return a.first < b.first;
                           })->second;
  return out;
}

// out.scales [rows, groups] = scale_of(row, the group's first column),
// over the cores.
template <typename ScaleOf>
void fill_group_scales(RowPackedWeight& out, const ScaleOf& scale_of) {
  const int64_t groups = out.groups();
  out.scales.resize(size_t(out.rows * groups));
  for_row_chunks(out.rows, out.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t n = r0; n < r1; ++n) {
      for (int64_t g = 0; g < groups; ++g) out.scales[size_t(n * groups + g)] = scale_of(n, g * out.group);
    }
  });
}

// e4m3: the bytes as they are; each group's scale the one the dequantizer
// multiplies its codes by (the tile, tensor or row scale).
Result<RowPackedWeight> pack_e4m3(const QuantizedWeight& w) {
  RowPackedWeight out;
  out.kind = CodeKind::kE4m3;
  out.rows = w.rows, out.cols = w.cols;
  out.group = w.format == WeightFormat::kFp8Block ? w.block_cols : std::min<int64_t>(w.cols, 128);
  if (w.format != WeightFormat::kFp8Block && w.cols % 128 != 0) out.group = w.cols;
  COHORT_RETURN_IF_ERROR(check_shape(w, out.kind, out.group));
  out.codes = w.packed;
  // Each group's scale: what the dequantizer multiplies its codes by (the
  // code of 1.0 times it). A group lies inside one tile: group and
  // tile widths are the same, or the scale is the row's or the tensor's.
  const PackedWeightView view = view_of(w);
  fill_group_scales(out, [&](int64_t n, int64_t k) {
    return e4m3_to_float(kE4m3One) * detail::fp8_scale_at(view, n, k);
  });
  return out;
}

// NF4: the level index of each element (two a byte, the first of the
// flattened weight in the high nibble), the block's absmax, which the
// dequantizer multiplies the levels by.
Result<RowPackedWeight> pack_nf4(const QuantizedWeight& w) {
  RowPackedWeight out;
  out.kind = CodeKind::kNf4;
  out.rows = w.rows, out.cols = w.cols, out.group = w.group_size;
  if (w.cols % w.group_size != 0) {
    return weight_error(w, "its NF4 blocks of " + std::to_string(w.group_size) + " cross rows of " +
                               std::to_string(w.cols) + " (in_features must be a multiple of the block)");
  }
  COHORT_RETURN_IF_ERROR(check_shape(w, out.kind, out.group));
  // Rows hold whole bytes (an even width), at the same offsets in both
  // layouts: each byte's two codes only trade nibbles (the even column
  // goes low).
  out.codes.resize(w.packed.size());
  const uint8_t* const from = w.packed.data();
  uint8_t* const to = out.codes.data();
  const size_t row_bytes = size_t(out.row_bytes());
  for_row_chunks(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    for (size_t i = size_t(r0) * row_bytes; i < size_t(r1) * row_bytes; ++i) to[i] = uint8_t((from[i] >> 4) | (from[i] << 4));
  });
  // Each block's scale is the dequantizer's absmax for it (what it
  // multiplies the block's levels by).
  const PackedWeightView view = view_of(w);
  fill_group_scales(out, [&](int64_t n, int64_t k) {
    return detail::nf4_block_scale(view, (n * w.cols + k) / w.group_size);
  });
  return out;
}

}  // namespace

const char* to_string(CodeKind kind) {
  switch (kind) {
    case CodeKind::kUint4: return "uint4";
    case CodeKind::kUint8: return "uint8";
    case CodeKind::kE4m3: return "e4m3";
    case CodeKind::kNf4: return "nf4";
  }
  return "?";
}

int code_bits(CodeKind kind) { return kind == CodeKind::kUint4 || kind == CodeKind::kNf4 ? 4 : 8; }

Result<RowPackedWeight> pack_rows(const QuantizedWeight& weight) {
  COHORT_RETURN_IF_ERROR(validate(weight));
  Result<RowPackedWeight> packed = internal_error("unreached");
  switch (weight.format) {
    case WeightFormat::kFp8Block:
    case WeightFormat::kFp8Tensor:
    case WeightFormat::kFp8Channel:
      packed = pack_e4m3(weight);
      break;
    case WeightFormat::kInt8:
      packed = pack_integer(weight, weight.group_size, 128);
      break;
    case WeightFormat::kInt4:
      packed = pack_integer(weight, weight.group_size, 8);
      break;
    case WeightFormat::kGptq:
      for (size_t k = 0; k < weight.g_idx.size(); ++k) {
        if (weight.g_idx[k] != int32_t(int64_t(k) / weight.group_size)) {
          return weight_error(weight, "act-order (g_idx out of column order) has no row layout");
        }
      }
      packed = pack_integer(weight, weight.group_size, 0);
      break;
    case WeightFormat::kAwq:
      packed = pack_integer(weight, weight.group_size, 0);
      break;
    case WeightFormat::kNf4:
      packed = pack_nf4(weight);
      break;
  }
  if (packed.is_ok()) packed->format = weight.describe();
  return packed;
}

Result<RowPackedWeight> stack_rows(const std::vector<RowPackedWeight>& parts) {
  if (parts.empty()) return invalid_argument("stack_rows: no weights");
  RowPackedWeight out;
  const RowPackedWeight& first = parts.front();
  out.kind = first.kind, out.cols = first.cols, out.group = first.group, out.format = first.format;
  bool zeros = false;
  for (const auto& p : parts) {
    if (p.kind != first.kind || p.cols != first.cols || p.group != first.group) {
      return invalid_argument("stack_rows: " + p.format + " [" + std::to_string(p.cols) + "] g" +
                              std::to_string(p.group) + " does not stack on " + first.format + " [" +
                              std::to_string(first.cols) + "] g" + std::to_string(first.group));
    }
    zeros = zeros || !p.zeros.empty();
    out.rows += p.rows;
  }
  for (const auto& p : parts) {
    out.codes.insert(out.codes.end(), p.codes.begin(), p.codes.end());
    out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
    if (zeros && p.zeros.empty()) out.zeros.insert(out.zeros.end(), p.scales.size(), 0.0f);
    else out.zeros.insert(out.zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  return out;
}

Result<RowPackedWeight> slice(const RowPackedWeight& w, int64_t row_begin, int64_t rows, int64_t col_begin,
                              int64_t cols) {
  const int bits = code_bits(w.kind);
  const bool whole_groups = col_begin % w.group == 0 && ((col_begin + cols) % w.group == 0 || col_begin + cols == w.cols);
  if (row_begin < 0 || rows < 0 || row_begin + rows > w.rows || col_begin < 0 || cols <= 0 ||
      col_begin + cols > w.cols || !whole_groups || (cols * bits) % 128 != 0) {
    return invalid_argument(w.format + ": the cut of rows [" + std::to_string(row_begin) + ", +" + std::to_string(rows) +
                            ") and columns [" + std::to_string(col_begin) + ", +" + std::to_string(cols) + ") of [" +
                            std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] splits its groups of " +
                            std::to_string(w.group) + " columns");
  }
  RowPackedWeight out;
  out.kind = w.kind, out.rows = rows, out.cols = cols, out.group = w.group, out.format = w.format;
  const int64_t groups = w.groups(), out_groups = out.groups(), g0 = col_begin / w.group;
  const int64_t byte0 = col_begin * bits / 8, bytes = out.row_bytes();
  out.codes.resize(size_t(rows * bytes));
  out.scales.resize(size_t(rows * out_groups));
  if (!w.zeros.empty()) out.zeros.resize(size_t(rows * out_groups));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = row_begin + r;
    std::copy_n(w.codes.begin() + n * w.row_bytes() + byte0, bytes, out.codes.begin() + r * bytes);
    std::copy_n(w.scales.begin() + n * groups + g0, out_groups, out.scales.begin() + r * out_groups);
    if (!w.zeros.empty()) std::copy_n(w.zeros.begin() + n * groups + g0, out_groups, out.zeros.begin() + r * out_groups);
  }
  return out;
}

std::optional<std::vector<float>> fp8_block_scales(const RowPackedWeight& w) {
  constexpr int64_t kBlock = 128;
  if (w.kind != CodeKind::kE4m3 || w.group != kBlock || w.rows % kBlock != 0 || w.cols % kBlock != 0) {
    return std::nullopt;
  }
  const int64_t groups = w.groups(), stride = (groups + 3) & ~int64_t{3};
  std::vector<float> blocks(static_cast<size_t>(w.rows / kBlock * stride), 0.0f);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = w.scales[static_cast<size_t>(r * groups + g)];
      float& block = blocks[static_cast<size_t>(r / kBlock * stride + g)];
      if (r % kBlock == 0) block = scale;
      else if (scale != block) return std::nullopt;
    }
  }
  return blocks;
}

RowPackedView view_of(const RowPackedWeight& w) {
  RowPackedView v;
  v.kind = w.kind, v.rows = int(w.rows), v.cols = int(w.cols), v.group = int(w.group);
  v.codes = w.codes.data(), v.scales = w.scales.data();
  v.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  v.centred = centred_uint4(w);
  return v;
}

bool centred_uint4(const RowPackedWeight& w) {
  return w.kind == CodeKind::kUint4 && !w.zeros.empty() &&
         std::all_of(w.zeros.begin(), w.zeros.end(), [](float z) { return z == 8.0f; });
}

void dequantize(const RowPackedWeight& w, float* out) { dequantize(view_of(w), out); }

void dequantize(const RowPackedView& w, float* out) {
  const int64_t cols = w.cols, groups = (cols + w.group - 1) / w.group;
  const int64_t stride = cols * code_bits(w.kind) / 8;
  for (int64_t n = 0; n < w.rows; ++n) {
    const uint8_t* row = w.codes + n * stride;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t g = size_t(n * groups + k / w.group);
      const int nibble = k % 2 == 0 ? row[k / 2] & 0xf : row[k / 2] >> 4;
      float value;
      switch (w.kind) {
        case CodeKind::kUint4: value = float(nibble); break;
        case CodeKind::kNf4: value = kNf4Levels[nibble]; break;
        case CodeKind::kUint8: value = float(row[k]); break;
        default: value = e4m3_to_float(row[k]); break;
      }
      const float zero = w.zeros ? w.zeros[g] : 0.0f;
      out[n * cols + k] = w.scales[g] * (value - zero);
    }
  }
}

}  // namespace cohort::models::quant
