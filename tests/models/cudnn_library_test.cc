// The cuDNN library the fused attention opens: COHORT_CUDNN_LIBRARY names
// it, and a file that does not load is named in the reason that "auto"
// logs and "cudnn" reports. Needs no GPU. Its own binary, since the library
// is loaded once per process.
#include <gtest/gtest.h>

#include <cstdlib>

#include "models/cuda/cudnn_attention.h"

namespace cohort::models::cuda {
namespace {

TEST(CudnnLibrary, ALibraryThatDoesNotLoadIsNamedInTheReason) {
  ::setenv("COHORT_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
  const Status available = cudnn_attention_available();
  ASSERT_FALSE(available.is_ok());
  if (available.message().find("no cuDNN support") != std::string::npos) {
    GTEST_SKIP() << available.message();
  }
  EXPECT_EQ(available.code(), StatusCode::kUnavailable);
  EXPECT_NE(available.message().find("cannot load /nonexistent/libcudnn.so.9"), std::string::npos)
      << available.message();
  auto made = CudnnAttention::create();
  ASSERT_FALSE(made.is_ok());
  EXPECT_EQ(made.status().message(), available.message());
  ::unsetenv("COHORT_CUDNN_LIBRARY");
}

}  // namespace
}  // namespace cohort::models::cuda
