#include "base/parallel_dims.h"

#include <fmt/format.h>

namespace cohort {

Result<ParallelDims> ParallelDims::create(int world, int tp, int ep) {
  if (world < 1) return invalid_argument(fmt::format("world size {} must be at least 1", world));
  if (tp < 1) return invalid_argument(fmt::format("tensor_parallel {} must be at least 1", tp));
  if (world % tp != 0)
    return invalid_argument(fmt::format(
        "tensor_parallel {} does not divide the world size {}: dp × tp must equal the world size", tp, world));
  if (ep < 1) return invalid_argument(fmt::format("expert_parallel {} must be at least 1", ep));
  const int dp = world / tp;
  if (dp % ep != 0)
    return invalid_argument(fmt::format(
        "expert_parallel {} does not divide the data-parallel degree {} (world {} / tensor_parallel {})", ep, dp,
        world, tp));
  return ParallelDims{world, dp, tp, ep};
}

std::string ParallelDims::to_string() const {
  if (ep > 1) return fmt::format("world {} = dp {} (ep {}) × tp {}", world, dp, ep, tp);
  return fmt::format("world {} = dp {} × tp {}", world, dp, tp);
}

}  // namespace cohort
