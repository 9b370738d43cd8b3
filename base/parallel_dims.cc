#include "base/parallel_dims.h"

#include <fmt/format.h>

namespace cohort {

Result<ParallelDims> ParallelDims::create(int world, int tp) {
  if (world < 1) return invalid_argument(fmt::format("world size {} must be at least 1", world));
  if (tp < 1) return invalid_argument(fmt::format("tensor_parallel {} must be at least 1", tp));
  if (world % tp != 0)
    return invalid_argument(fmt::format(
        "tensor_parallel {} does not divide the world size {}: dp × tp must equal the world size", tp, world));
  return ParallelDims{world, world / tp, tp};
}

std::string ParallelDims::to_string() const {
  return fmt::format("world {} = dp {} × tp {}", world, dp, tp);
}

}  // namespace cohort
