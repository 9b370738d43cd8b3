// The system prober's NVML reader against a fake libnvidia-ml.so.1
// (fake_nvml.cc): it finds the GPUs through NVML, and health() turns Xid
// events, uncorrected ECC counts and a GPU that stops answering into faults.
// Its own binary: once the fake is loaded, every prober in the process sees
// NVML.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include "agent/gpu_discovery.h"

namespace cohort::agent {
namespace {

struct FakeNvmlControls {
  void (*reset)(int) = nullptr;
  void (*set_ecc)(int, unsigned long long) = nullptr;
  void (*set_ecc_supported)(int, bool) = nullptr;
  void (*lose)(int, bool) = nullptr;
  void (*push_xid)(int, unsigned long long) = nullptr;
};

class FakeNvml : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // RTLD_GLOBAL and the soname: the prober's own dlopen finds this one.
    library_ = dlopen(FAKE_NVML, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(library_, nullptr) << dlerror();
    fake_.reset = reinterpret_cast<void (*)(int)>(dlsym(library_, "fake_nvml_reset"));
    fake_.set_ecc =
        reinterpret_cast<void (*)(int, unsigned long long)>(dlsym(library_, "fake_nvml_set_ecc"));
    fake_.set_ecc_supported =
        reinterpret_cast<void (*)(int, bool)>(dlsym(library_, "fake_nvml_set_ecc_supported"));
    fake_.lose = reinterpret_cast<void (*)(int, bool)>(dlsym(library_, "fake_nvml_lose"));
    fake_.push_xid =
        reinterpret_cast<void (*)(int, unsigned long long)>(dlsym(library_, "fake_nvml_push_xid"));
    ASSERT_TRUE(fake_.reset && fake_.set_ecc && fake_.set_ecc_supported && fake_.lose &&
                fake_.push_xid);
  }
  void SetUp() override {
    ASSERT_NE(library_, nullptr);
    fake_.reset(2);
    prober_ = make_system_prober();
  }
  static std::string fault_of(const std::vector<GpuFault>& faults, int index) {
    for (const auto& f : faults) {
      if (f.index == index) return f.reason;
    }
    return "";
  }
  static inline void* library_ = nullptr;
  static inline FakeNvmlControls fake_;
  std::unique_ptr<GpuProber> prober_;
};

TEST_F(FakeNvml, TheSystemProberFindsItsGpusThroughNvmlAndHealthyOnesGiveNoFault) {
  auto gpus = prober_->probe();
  ASSERT_TRUE(gpus) << gpus.status().message();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].name, "Fake NVML GPU");
  EXPECT_EQ((*gpus)[1].pci_bus_id, "00000000:19:00.0");
  EXPECT_EQ(prober_->sample().size(), 2u);
  EXPECT_TRUE(prober_->health().empty());
  EXPECT_TRUE(prober_->health().empty());
}

TEST_F(FakeNvml, ACriticalXidIsAFaultOfItsGpuOnce) {
  EXPECT_TRUE(prober_->health().empty());  // registers for the events
  fake_.push_xid(1, 79);
  auto faults = prober_->health();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].index, 1);
  EXPECT_EQ(faults[0].reason, "Xid 79 (GPU has fallen off the bus)");
  // Reported once: the coordinator keeps the node drained until undrained.
  EXPECT_TRUE(prober_->health().empty());
}

TEST_F(FakeNvml, AnXidAProgramCausesIsNoFault) {
  EXPECT_TRUE(prober_->health().empty());
  fake_.push_xid(0, 13);  // graphics engine exception: the program's error
  fake_.push_xid(0, 31);  // its memory page fault
  EXPECT_TRUE(prober_->health().empty());
  fake_.push_xid(0, 48);
  EXPECT_EQ(fault_of(prober_->health(), 0), "Xid 48 (double-bit ECC error)");
}

TEST_F(FakeNvml, UncorrectedEccErrorsSinceTheStartAreAFaultUntilTheCountersClear) {
  fake_.set_ecc(0, 3);  // before the agent started: not its concern
  EXPECT_TRUE(prober_->health().empty());
  fake_.set_ecc(0, 5);
  EXPECT_EQ(fault_of(prober_->health(), 0), "2 uncorrected ECC error(s) since the agent started");
  EXPECT_EQ(fault_of(prober_->health(), 0), "2 uncorrected ECC error(s) since the agent started");
  fake_.set_ecc(0, 0);  // a GPU reset cleared the volatile counters
  EXPECT_TRUE(prober_->health().empty());
  fake_.set_ecc(0, 1);
  EXPECT_EQ(fault_of(prober_->health(), 0), "1 uncorrected ECC error(s) since the agent started");
}

TEST_F(FakeNvml, AGpuThatNoLongerAnswersIsAFaultWhileItDoesNot) {
  fake_.set_ecc_supported(1, false);  // ECC off: whether it answers is asked otherwise
  EXPECT_TRUE(prober_->health().empty());
  fake_.lose(1, true);
  EXPECT_EQ(fault_of(prober_->health(), 1), "does not answer: GPU is lost (NVML error 15)");
  EXPECT_EQ(prober_->sample().size(), 1u);  // its figures are left out
  fake_.lose(1, false);
  EXPECT_TRUE(prober_->health().empty());
}

TEST_F(FakeNvml, AGpuLostBeforeTheFirstLookIsAFaultToo) {
  fake_.lose(0, true);
  EXPECT_EQ(fault_of(prober_->health(), 0), "does not answer: GPU is lost (NVML error 15)");
}

TEST_F(FakeNvml, ASelectedProberReportsOnlyItsGpusFaults) {
  auto selected = make_selected_prober(std::shared_ptr<GpuProber>(make_system_prober()), {1});
  ASSERT_TRUE(selected->probe());
  EXPECT_TRUE(selected->health().empty());
  fake_.push_xid(0, 79);
  fake_.push_xid(1, 74);
  auto faults = selected->health();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].index, 1);
  EXPECT_EQ(faults[0].reason, "Xid 74 (NVLink error)");
}

}  // namespace
}  // namespace cohort::agent
