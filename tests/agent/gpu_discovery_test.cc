// GPU discovery: nvidia-smi CSV parsing, fakes, CPU slots, and the system
// prober's fallback to nvidia-smi (with a fake nvidia-smi on PATH).
#include "agent/gpu_discovery.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024ull;

const char* kTwoH200s =
    "0, GPU-5c1f1e7a-3b0d-5d2e-9d43-1d3d1a9a1f01, 00000000:19:00.0, NVIDIA H200, 143771\n"
    "1, GPU-7e2a0c4b-8f11-2a3c-b7e5-44c2d0b9e702, 00000000:3B:00.0, NVIDIA H200, 143771\n";

TEST(ParseNvidiaSmiCsv, ReadsEveryField) {
  auto gpus = parse_nvidia_smi_csv(kTwoH200s);
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuInfo& second = (*gpus)[1];
  EXPECT_EQ(second.index, 1);
  EXPECT_EQ(second.uuid, "GPU-7e2a0c4b-8f11-2a3c-b7e5-44c2d0b9e702");
  EXPECT_EQ(second.pci_bus_id, "00000000:3B:00.0");
  EXPECT_EQ(second.name, "NVIDIA H200");
  EXPECT_EQ(second.memory_bytes, 143771 * kMiB);
  EXPECT_FALSE(is_cpu_slot(second));
}

TEST(ParseNvidiaSmiCsv, SortsByIndexAndSkipsBlankLines) {
  auto gpus = parse_nvidia_smi_csv(
      "\n1, GPU-b, 00000000:3B:00.0, NVIDIA H200, 10\r\n\n0, GPU-a, 00000000:19:00.0, NVIDIA H200, "
      "10\n");
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].uuid, "GPU-a");
  EXPECT_EQ((*gpus)[1].uuid, "GPU-b");
}

TEST(ParseNvidiaSmiCsv, KeepsCommasInsideTheName) {
  auto gpus = parse_nvidia_smi_csv("0, GPU-a, 00000000:19:00.0, Tesla V100, SXM2, 32510\n");
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  EXPECT_EQ((*gpus)[0].name, "Tesla V100, SXM2");
  EXPECT_EQ((*gpus)[0].memory_bytes, 32510 * kMiB);
}

TEST(ParseNvidiaSmiCsv, ReadsUnavailableMemoryAsZero) {
  auto gpus = parse_nvidia_smi_csv("0, GPU-a, 00000000:19:00.0, NVIDIA H200, [N/A]\n");
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  EXPECT_EQ((*gpus)[0].memory_bytes, 0u);
}

TEST(ParseNvidiaSmiCsv, EmptyOutputMeansNoGpus) {
  auto gpus = parse_nvidia_smi_csv("");
  ASSERT_TRUE(gpus.is_ok());
  EXPECT_TRUE(gpus->empty());
}

TEST(ParseNvidiaSmiCsv, RejectsAShortLineNamingIt) {
  auto gpus = parse_nvidia_smi_csv(std::string(kTwoH200s) + "2, GPU-c, 00000000:5D:00.0\n");
  ASSERT_FALSE(gpus.is_ok());
  EXPECT_NE(gpus.status().message().find("line 3"), std::string::npos) << gpus.status().message();
}

TEST(ParseNvidiaSmiCsv, RejectsABadIndexOrMemory) {
  EXPECT_FALSE(parse_nvidia_smi_csv("x, GPU-a, 00000000:19:00.0, H200, 1\n").is_ok());
  EXPECT_FALSE(parse_nvidia_smi_csv("0, GPU-a, 00000000:19:00.0, H200, lots\n").is_ok());
}

TEST(ParseNvidiaSmiCsv, RejectsADuplicateIndex) {
  auto gpus = parse_nvidia_smi_csv(
      "0, GPU-a, 00000000:19:00.0, H200, 1\n0, GPU-b, 00000000:3B:00.0, H200, 1\n");
  ASSERT_FALSE(gpus.is_ok());
  EXPECT_NE(gpus.status().message().find("appears twice"), std::string::npos);
}

TEST(FakeProber, GivesDistinctUuidsAndBusIdsInIndexOrder) {
  auto gpus = make_fake_prober(8)->probe();
  ASSERT_TRUE(gpus.is_ok());
  ASSERT_EQ(gpus->size(), 8u);
  std::set<std::string> uuids, buses;
  for (int i = 0; i < 8; ++i) {
    const GpuInfo& gpu = (*gpus)[i];
    EXPECT_EQ(gpu.index, i);
    EXPECT_FALSE(is_cpu_slot(gpu));
    EXPECT_GT(gpu.memory_bytes, 0u);
    uuids.insert(gpu.uuid);
    buses.insert(gpu.pci_bus_id);
  }
  EXPECT_EQ(uuids.size(), 8u);
  EXPECT_EQ(buses.size(), 8u);
  // Bus ids ascend with the index, as nvidia-smi's do.
  EXPECT_LT((*gpus)[0].pci_bus_id, (*gpus)[7].pci_bus_id);
}

TEST(CpuSlotsProber, GivesCpuSlots) {
  auto slots = make_cpu_slots_prober(3)->probe();
  ASSERT_TRUE(slots.is_ok());
  ASSERT_EQ(slots->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*slots)[i].index, i);
    EXPECT_TRUE(is_cpu_slot((*slots)[i]));
  }
  EXPECT_TRUE(make_cpu_slots_prober(0)->probe()->empty());
}

// Puts a fake `nvidia-smi` first on PATH for the test's duration.
class FakeNvidiaSmi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW)) {
      dlclose(nvml);
      GTEST_SKIP() << "NVML is present here, so the system prober never reaches nvidia-smi";
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("cohort-fake-smi-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    const char* path = getenv("PATH");
    old_path_ = path ? path : "";
    setenv("PATH", (dir_.string() + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) {
      setenv("PATH", old_path_.c_str(), 1);
      std::filesystem::remove_all(dir_);
    }
  }
  void write_script(const std::string& body) {
    std::string file = (dir_ / "nvidia-smi").string();
    std::ofstream(file) << "#!/bin/sh\n" << body;
    chmod(file.c_str(), 0755);
  }
  std::filesystem::path dir_;
  std::string old_path_;
};

TEST_F(FakeNvidiaSmi, SystemProberFallsBackToNvidiaSmi) {
  write_script(std::string("cat <<'CSV'\n") + kTwoH200s + "CSV\n");
  auto gpus = make_system_prober()->probe();
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].pci_bus_id, "00000000:3B:00.0");
}

TEST_F(FakeNvidiaSmi, ADriverThatDoesNotAnswerMeansNoGpus) {
  write_script(
      "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
      "exit 9\n");
  auto gpus = make_system_prober()->probe();
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  EXPECT_TRUE(gpus->empty());
}

TEST(SystemProber, NeverFailsOnThisHost) {
  // With or without GPUs, a probe of a healthy host succeeds.
  auto gpus = make_system_prober()->probe();
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  for (size_t i = 0; i < gpus->size(); ++i) EXPECT_EQ((*gpus)[i].index, static_cast<int>(i));
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

TEST(SelectedProber, OffersOnlyTheNamedGpusInBusOrder) {
  auto selected = make_selected_prober(make_fake_prober(4), {3, 1});
  auto gpus = selected->probe();
  ASSERT_TRUE(gpus.is_ok()) << gpus.status().to_string();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].index, 1);
  EXPECT_EQ((*gpus)[1].index, 3);
}

TEST(SelectedProber, AnIndexTheNodeLacksIsAnErrorNamingIt) {
  auto selected = make_selected_prober(make_fake_prober(2), {0, 5});
  auto gpus = selected->probe();
  ASSERT_FALSE(gpus.is_ok());
  EXPECT_NE(gpus.status().message().find("GPU 5"), std::string::npos) << gpus.status().message();
}

}  // namespace
}  // namespace cohort::agent
