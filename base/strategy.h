// Strategy: the data-parallel strategy, one vocabulary for the job file
// (`parallel.strategy`), parallel/ (what each one shards, data_parallel.h)
// and checkpoints. The names are the job file's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort {

enum class Strategy { kDdp, kZero1, kZero2, kZero3, kFsdp2 };

// "ddp", "zero1", "zero2", "zero3", "fsdp2".
const char* strategy_name(Strategy strategy);
// Every strategy's name, in the enum's order (the job file's choices).
const std::vector<std::string>& strategy_names();
// kInvalidArgument naming the choices for anything else; never a fallback.
Result<Strategy> parse_strategy(std::string_view name);

}  // namespace cohort
