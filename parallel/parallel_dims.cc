#include "parallel/parallel_dims.h"

#include <fmt/format.h>

namespace cohort::parallel {

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDdp: return "ddp";
    case Strategy::kZero1: return "zero1";
    case Strategy::kZero2: return "zero2";
    case Strategy::kZero3: return "zero3";
    case Strategy::kFsdp2: return "fsdp2";
  }
  return "?";
}

Result<Strategy> parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3, Strategy::kFsdp2})
    if (name == strategy_name(s)) return s;
  return invalid_argument("unknown strategy '" + name + "' (ddp, zero1, zero2, zero3 or fsdp2)");
}

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

}  // namespace cohort::parallel
