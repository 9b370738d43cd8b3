// [model] attention's names and what a backend can run: the CPU reference
// runs the math path and refuses cuDNN with its reason (the worker turns
// that into the job's error for attention = "cudnn").
#include <gtest/gtest.h>

#include "models/backend.h"
#include "models/ops/attention.h"

namespace cohort::models {
namespace {

TEST(AttentionBackend, EveryJobFileNameHasItsBackend) {
  EXPECT_EQ(attention_backend_named("auto"), AttentionBackend::kAuto);
  EXPECT_EQ(attention_backend_named("cudnn"), AttentionBackend::kCudnn);
  EXPECT_EQ(attention_backend_named("flash"), AttentionBackend::kFlash);
  EXPECT_EQ(attention_backend_named("math"), AttentionBackend::kMath);
}

TEST(AttentionBackend, TheCpuBackendRefusesCudnnWithItsReason) {
  auto cpu = make_cpu_backend();
  const Status cudnn = cpu->attention_available(AttentionBackend::kCudnn);
  EXPECT_EQ(cudnn.code(), StatusCode::kUnavailable);
  EXPECT_NE(cudnn.message().find("CUDA devices only"), std::string::npos) << cudnn.message();
  for (AttentionBackend b : {AttentionBackend::kAuto, AttentionBackend::kFlash, AttentionBackend::kMath}) {
    EXPECT_TRUE(cpu->attention_available(b).is_ok());
  }
  EXPECT_FALSE(cpu->attention_runs_fused(128));  // the CPU reference always runs the math path
}

}  // namespace
}  // namespace cohort::models
