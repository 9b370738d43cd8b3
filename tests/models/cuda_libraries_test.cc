// The CUDA libraries cohort opens at run time, which needs no GPU:
// - cuDNN, for the fused attention: the system's libcudnn.so.9 loads with
//   every entry point cohort uses, and COHORT_CUDNN_LIBRARY naming a file
//   that does not load gives the reason that "auto" logs and "cudnn" reports;
// - cuBLAS and cuBLASLt: they load with every entry point, and CPU work
//   never maps them (their start-up would cost every CPU rank and tool).
// Each library is loaded once per process, so each case runs in a child of
// its own.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/dynamic_library.h"
#include "models/backend.h"
#include "models/cuda/cublas_api.h"
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

// Whether this process has a file whose name contains `name` mapped.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

TEST(CublasLibraries, TheSystemsLibrariesLoadWithEveryEntryPoint) {
  auto system = DynamicLibrary::open("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  if (!system.is_ok()) GTEST_SKIP() << "no cuBLAS on this host: " << system.status().message();
  EXPECT_EXIT(
      {
        Result<const blas::Api*> api = blas::api();
        finish(api.is_ok() && blas::opened() && mapped("libcublasLt.so") && mapped("libcublas.so"),
               status_of(api));
      },
      ::testing::ExitedWithCode(0), "");
}

// A linear layer on the CPU backend, then whether cuBLAS was opened.
[[noreturn]] void linear_on_cpu_in_child() {
  auto cpu = make_cpu_backend();
  const int n = 2, in = 3, out = 4;
  std::vector<float> x(n * in, 0.5f), w(out * in, 0.25f), y(n * out);
  cpu->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out);
  finish(y[0] == 0.375f && !blas::opened() && !mapped("libcublas"),
         internal_error("the CPU linear opened cuBLAS or computed " + std::to_string(y[0])));
}

TEST(CublasLibraries, CpuWorkNeverMapsThem) {
  // Not even linked: the test binary links the models library as a worker does.
  EXPECT_FALSE(mapped("libcublas"));
  EXPECT_EXIT(linear_on_cpu_in_child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace cohort::models::cuda
