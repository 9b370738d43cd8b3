// Deterministic initialisation of one parameter's local slice: the values
// are those of the unsharded tensor drawn from a counter-based stream
// (counter_random.h), cut as the ParamSpec says, so a tensor-parallel shard
// initialised with a seed equals the same slice of the unsharded model.
#pragma once

#include <cstddef>
#include <cstdint>

#include "models/param_layout.h"

namespace cohort::models {

// Index of local element i of p in the global (unsharded) tensor.
uint64_t global_index(const ParamSpec& p, size_t i);

// dst (p.numel floats, host memory) = p's slice of a tensor drawn from
// `stream`: N(0, stddev²), or uniform in [-bound, bound). Large tensors fill
// on several threads.
void fill_normal(float* dst, const ParamSpec& p, uint64_t stream, float stddev);
void fill_uniform(float* dst, const ParamSpec& p, uint64_t stream, float bound);

}  // namespace cohort::models
