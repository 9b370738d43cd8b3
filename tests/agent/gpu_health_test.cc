// GPU health rules without NVML: readings to faults (gpu_health.h), and a
// system prober that is a no-op where there is no NVML.
#include "agent/gpu_health.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

GpuHealthReading reading(int index, std::optional<uint64_t> ecc = std::nullopt,
                         std::vector<uint64_t> xids = {}, std::string no_answer = "") {
  GpuHealthReading r;
  r.index = index;
  r.uncorrected_ecc = ecc;
  r.xids = std::move(xids);
  r.no_answer = std::move(no_answer);
  return r;
}

TEST(GpuHealthTracker, HealthyReadingsGiveNoFault) {
  GpuHealthTracker tracker;
  EXPECT_TRUE(tracker.update({reading(0, 0), reading(1)}).empty());
  EXPECT_TRUE(tracker.update({reading(0, 0), reading(1)}).empty());
}

TEST(GpuHealthTracker, EccErrorsCountFromTheFirstReadingUntilTheCountersClear) {
  GpuHealthTracker tracker;
  EXPECT_TRUE(tracker.update({reading(0, 7)}).empty());  // older than the agent
  auto faults = tracker.update({reading(0, 9)});
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].reason, "2 uncorrected ECC error(s) since the agent started");
  EXPECT_EQ(tracker.update({reading(0, 9)}).size(), 1u);  // still so
  EXPECT_TRUE(tracker.update({reading(0, 0)}).empty());   // a reset cleared them
  EXPECT_EQ(tracker.update({reading(0, 1)}).at(0).reason,
            "1 uncorrected ECC error(s) since the agent started");
  // A GPU whose ECC is off has no count: nothing to compare.
  EXPECT_TRUE(tracker.update({reading(1)}).empty());
}

TEST(GpuHealthTracker, CriticalXidsAreFaultsAndAProgramsOwnAreNot) {
  GpuHealthTracker tracker;
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) {
    EXPECT_TRUE(tracker.update({reading(0, std::nullopt, {xid})}).empty()) << "Xid " << xid;
  }
  auto faults =
      tracker.update({reading(2, std::nullopt, {79, 79, 48}), reading(0, std::nullopt, {13})});
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].index, 2);
  EXPECT_EQ(faults[0].reason, "Xid 79 (GPU has fallen off the bus); Xid 48 (double-bit ECC error)");
  EXPECT_EQ(tracker.update({reading(0, std::nullopt, {200})}).at(0).reason, "Xid 200");
}

TEST(GpuHealthTracker, AGpuThatDoesNotAnswerIsAFaultWithEverythingElseItSays) {
  GpuHealthTracker tracker;
  EXPECT_TRUE(tracker.update({reading(0, 0), reading(1, 0)}).empty());
  auto faults = tracker.update(
      {reading(1, std::nullopt, {79}, "GPU is lost (NVML error 15)"), reading(0, 0)});
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].index, 1);
  EXPECT_EQ(faults[0].reason,
            "does not answer: GPU is lost (NVML error 15); Xid 79 (GPU has fallen off the bus)");
}

TEST(GpuHealthTracker, FaultsComeInIndexOrder) {
  GpuHealthTracker tracker;
  auto faults = tracker.update({reading(3, std::nullopt, {74}), reading(1, std::nullopt, {74})});
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].index, 1);
  EXPECT_EQ(faults[1].index, 3);
}

TEST(SystemProber, ReportsNoFaultsWithoutNvml) {
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW)) {
    dlclose(nvml);
    GTEST_SKIP() << "NVML is present here (agent_nvml_test covers the reader with a fake library)";
  }
  auto prober = make_system_prober();
  EXPECT_TRUE(prober->health().empty());
  EXPECT_TRUE(prober->health().empty());
}

}  // namespace
}  // namespace cohort::agent
