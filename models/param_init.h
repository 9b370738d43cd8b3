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

// Elements [begin, end) of fill_normal's values (dst still p's first
// element), on the calling thread: for callers that spread many tensors'
// pieces over the cores themselves (a mixture of experts' layer is hundreds
// of tensors of 1-3M elements, each too small for fill_normal's own
// threads to reach more than two cores).
void fill_normal_range(float* dst, const ParamSpec& p, uint64_t stream, float stddev, size_t begin, size_t end);

}  // namespace cohort::models
