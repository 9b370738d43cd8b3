#include "base/strategy.h"

namespace cohort {

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

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (Strategy s : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3,
                       Strategy::kFsdp2}) {
      out.emplace_back(strategy_name(s));
    }
    return out;
  }();
  return names;
}

Result<Strategy> parse_strategy(std::string_view name) {
  const auto& names = strategy_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (name == names[i]) return static_cast<Strategy>(i);
  }
  return invalid_argument("unknown strategy '" + std::string(name) +
                          "' (ddp, zero1, zero2, zero3 or fsdp2)");
}

}  // namespace cohort
