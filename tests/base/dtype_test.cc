// DType: one table of sizes and names for models/ and collective/.
#include "base/dtype.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort {
namespace {

TEST(DType, EveryDtypeHasItsSizeAndLowercaseName) {
  struct Row {
    DType dtype;
    size_t size;
    const char* name;
  };
  for (const Row& r :
       {Row{DType::kF32, 4, "f32"}, Row{DType::kBF16, 2, "bf16"}, Row{DType::kF16, 2, "f16"},
        Row{DType::kI32, 4, "i32"}, Row{DType::kI64, 8, "i64"}, Row{DType::kU8, 1, "u8"}}) {
    EXPECT_EQ(dtype_size(r.dtype), r.size) << r.name;
    EXPECT_STREQ(dtype_name(r.dtype), r.name);
  }
}

}  // namespace
}  // namespace cohort
