// DynamicLibrary: what a missing library or symbol says, and that a found
// symbol is the library's own. libm is on every host these tests run on.
#include "base/dynamic_library.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cohort {
namespace {

TEST(DynamicLibrary, AMissingFileIsNamedWithTheLoadersReason) {
  auto lib = DynamicLibrary::open("/nonexistent/libnothing.so.1");
  ASSERT_FALSE(lib.is_ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("cannot load /nonexistent/libnothing.so.1: "), std::string::npos)
      << lib.status().message();
  EXPECT_NE(lib.status().message().find("No such file"), std::string::npos) << lib.status().message();
}

TEST(DynamicLibrary, FindsTheLibrarysSymbolsAndNamesAMissingOne) {
  auto opened = DynamicLibrary::open("libm.so.6");
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const DynamicLibrary& lib = *opened;
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(lib.require("cos", &cosine).is_ok());
  EXPECT_DOUBLE_EQ(cosine(0.5), std::cos(0.5));

  int (*nothing)() = reinterpret_cast<int (*)()>(1);
  EXPECT_FALSE(lib.find("cohort_no_such_symbol", &nothing));
  EXPECT_EQ(nothing, nullptr);
  const Status missing = lib.require("cohort_no_such_symbol", &nothing);
  EXPECT_EQ(missing.code(), StatusCode::kUnavailable);
  EXPECT_EQ(missing.message(), "libm.so.6 has no symbol cohort_no_such_symbol");
}

TEST(DynamicLibrary, MovingHandsTheLibraryOver) {
  auto opened = DynamicLibrary::open("libm.so.6");
  ASSERT_TRUE(opened.is_ok());
  DynamicLibrary first = std::move(opened).value();
  DynamicLibrary second = std::move(first);
  EXPECT_FALSE(first.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  ASSERT_TRUE(second.is_open());
  double (*sine)(double) = nullptr;
  EXPECT_TRUE(second.find("sin", &sine));
  EXPECT_FALSE(first.find("sin", &sine));
  EXPECT_EQ(sine, nullptr);
}

}  // namespace
}  // namespace cohort
