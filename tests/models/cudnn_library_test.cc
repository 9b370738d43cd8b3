// The cuDNN library the fused attention opens, which needs no GPU: the
// system's libcudnn.so.9 loads with every entry point cohort uses, and
// COHORT_CUDNN_LIBRARY naming a file that does not load gives the reason
// that "auto" logs and "cudnn" reports. The library is loaded once per
// process, so each case runs in a child of its own.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "base/dynamic_library.h"
#include "models/cuda/cudnn_attention.h"

namespace cohort::models::cuda {
namespace {

// Runs in the child: exit 0 when `status` is what the case expects, else
// print it and exit 1.
[[noreturn]] void finish(bool expected, const Status& status) {
  if (!expected) std::fprintf(stderr, "unexpected: %s\n", status.to_string().c_str());
  std::exit(expected ? 0 : 1);
}

TEST(CudnnLibrary, TheSystemsLibraryLoadsWithEveryEntryPoint) {
  auto system = DynamicLibrary::open("libcudnn.so.9");
  if (!system.is_ok()) GTEST_SKIP() << "no cuDNN on this host: " << system.status().message();
  EXPECT_EXIT(
      {
        ::unsetenv("COHORT_CUDNN_LIBRARY");
        const Status available = cudnn_attention_available();
        finish(available.is_ok() || available.message().find("no cuDNN support") != std::string::npos,
               available);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CudnnLibrary, ALibraryThatDoesNotLoadIsNamedInTheReason) {
  EXPECT_EXIT(
      {
        ::setenv("COHORT_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
        const Status available = cudnn_attention_available();
        auto made = CudnnAttention::create();
        const bool named = available.code() == StatusCode::kUnavailable &&
                           available.message().find("cannot load /nonexistent/libcudnn.so.9") != std::string::npos;
        const bool headerless = available.message().find("no cuDNN support") != std::string::npos;
        finish((named || headerless) && !made.is_ok() && made.status().message() == available.message(),
               available);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace cohort::models::cuda
