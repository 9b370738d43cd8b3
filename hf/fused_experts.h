// Experts saved fused. transformers 5 keeps a sparse layer's experts as two
// 3-D tensors, mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate
// rows, then its up rows) and mlp.experts.down_proj [E, H, I], and Mixtral's
// router as mlp.gate.weight; folders saved with save_original_format=False
// hold them so. cohort's parameters keep the per-expert names of the
// checkpoints on the Hub (param_layout.h); where a folder lacks one, the
// loader reads the parameter's slice of the fused tensor instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/param_layout.h"

namespace cohort::hf {

// Where this rank's part of `p` lies in a fused tensor: a block of it seen
// as 2-D (last dimension the columns).
struct FusedSlice {
  std::string tensor;
  std::vector<int64_t> shape;  // the fused tensor's shape for `experts` experts
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
};

// The fused source of an expert matrix or a Mixtral router, or nothing for
// any other parameter.
std::optional<FusedSlice> fused_expert_slice(const models::ParamSpec& p, int experts);

}  // namespace cohort::hf
