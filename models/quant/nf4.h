// NF4, QLoRA's NormalFloat4 (Dettmers et al. 2023, "QLoRA: Efficient
// Finetuning of Quantized LLMs"), with double quantization of the block
// scales, as bitsandbytes defines and stores it (bitsandbytes/functional.py:
// get_4bit_type("nf4"), quantize_4bit(..., compress_statistics=True),
// create_dynamic_map; the pure-torch quantize_4bit of
// bitsandbytes/backends/default/ops.py for the rounding):
//
//   blocks of 64 values of the flattened weight; a = max |w| of the block;
//   q = argmin_i |w / a - kNf4Levels[i]| (the first index on ties);
//   two codes a byte, the first in the high nibble;
//   double quantization: offset = mean(a); the a - offset in blocks of 256
//   are quantized the same way to 8-bit codes of dynamic_map() with one fp32
//   absmax each; a' = dynamic_map()[code] * block_absmax + offset;
//   W = kNf4Levels[q] * a'.
//
// An all-zero block (a = 0, which bitsandbytes turns into NaN) is stored as
// the zero level; the mean is summed in double, and dynamic_map() is
// computed in double and rounded once, so an entry may differ from
// bitsandbytes' float32 arithmetic in its last bit: the map travels with the
// definition, not with the data, and both quantize and dequantize use it.
#pragma once

#include <array>
#include <cstdint>

namespace cohort::models::quant {

inline constexpr int64_t kNf4Block = 64;
inline constexpr int64_t kNf4AbsmaxBlock = 256;

// The 16 NF4 levels, ascending, as bitsandbytes hard-codes them: normal
// quantiles Phi^-1 at linspace(0.9677083, 0.5, 9)[:-1] and their negatives
// at linspace(0.9677083, 0.5, 8)[:-1], with 0, scaled so the largest is 1.
inline constexpr float kNf4Levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8): 256 ascending values in [-1, 1], dense near zero.
const std::array<float, 256>& dynamic_map();

// argmin_i |x - table[i]|, the first such i: torch.argmin's tie rule.
int nearest_index(const float* table, int size, float x);

}  // namespace cohort::models::quant
