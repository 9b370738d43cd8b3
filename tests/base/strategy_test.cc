// Strategy: one name per enum value, and parsing never falls back.
#include "base/strategy.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(Strategy, EveryNameParsesBackToItsStrategy) {
  for (const std::string& name : strategy_names()) {
    auto s = parse_strategy(name);
    ASSERT_TRUE(s) << name;
    EXPECT_EQ(strategy_name(*s), name);
  }
  EXPECT_EQ(strategy_names().size(), 5u);
}

TEST(Strategy, AnUnknownNameIsAnErrorNotDdp) {
  auto s = parse_strategy("zero4");
  ASSERT_FALSE(s);
  EXPECT_NE(s.status().message().find("zero4"), std::string::npos);
}

}  // namespace
}  // namespace cohort
