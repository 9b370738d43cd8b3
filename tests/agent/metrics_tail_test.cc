// MetricsTail: it waits for rank 0's progress file, forwards complete rows
// only, starts over when the worker rewrites metrics.jsonl, and stays
// bounded per read. Fake GPUs report fixed samples.
#include "agent/metrics_tail.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/gpu_discovery.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

class MetricsTailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort-tail-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "progress" / "attempt-2");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& text, bool append = true) {
    std::ofstream out(dir_ / "metrics.jsonl", append ? std::ios::app : std::ios::trunc);
    out << text;
  }
  void progress() {
    std::ofstream out(dir_ / "progress" / "attempt-2" / "rank-0");
    out << R"({"step": 3, "total_steps": 500, "eta_s": 12.5})" << "\n";
  }
  fs::path dir_;
};

TEST_F(MetricsTailTest, WaitsForRankZerosProgressThenForwardsCompleteRows) {
  MetricsTail tail(dir_.string(), 2);
  write(R"({"step": 99, "loss": 9.0})" "\n");  // an earlier attempt's row, about to be dropped
  EXPECT_TRUE(tail.read(100.0).empty());
  write(R"({"step":1,"loss":4.5,"lr":0.001,"time":1700000000.5})" "\n"
        R"({"step":1,"eval_loss":4.0,"note":"text is ignored"})" "\n"
        R"({"step":2,"loss":4.25)", false);  // the worker rewrote the file; row 2 still being written
  progress();
  auto rows = tail.read(100.0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].step, 1);
  EXPECT_DOUBLE_EQ(rows[0].time, 1700000000.5);
  EXPECT_DOUBLE_EQ(rows[0].values.at("lr"), 0.001);
  EXPECT_DOUBLE_EQ(rows[1].time, 100.0) << "a row without time gets the reading time";
  EXPECT_EQ(rows[1].values.count("note"), 0u);
  EXPECT_EQ(tail.total_steps(), 500);
  EXPECT_DOUBLE_EQ(tail.eta_s(), 12.5);
  write("}\n");
  rows = tail.read(101.0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 2);
  EXPECT_TRUE(tail.read(102.0).empty());
}

TEST_F(MetricsTailTest, ARewrittenFileIsReadAgainAndReadsAreBounded) {
  MetricsTail tail(dir_.string(), 2);
  progress();
  for (int s = 1; s <= 10; ++s) write("{\"step\":" + std::to_string(s) + ",\"loss\":1}\n");
  EXPECT_EQ(tail.read(0, /*max_rows=*/4).size(), 4u);
  EXPECT_EQ(tail.read(0, 100).size(), 6u);
  write("{\"step\":5,\"loss\":2}\n", false);  // a resumed attempt kept less
  auto rows = tail.read(0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 5);
  write("garbage that is not json\n{\"step\":\"six\"}\n{\"step\":6,\"loss\":3}\n");
  rows = tail.read(0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 6);
}

TEST(GpuSamples, FakeGpusReportFixedTestValuesAndCpuSlotsNone) {
  auto fake = make_fake_prober(2)->sample();
  ASSERT_EQ(fake.size(), 2u);
  EXPECT_DOUBLE_EQ(fake[1].utilization, 0.15);
  EXPECT_EQ(fake[1].memory_used_bytes, 2ull << 30);
  EXPECT_TRUE(make_cpu_slots_prober(2)->sample().empty());
  std::shared_ptr<GpuProber> inner = make_fake_prober(4);
  auto chosen = make_selected_prober(inner, {1, 3})->sample();
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[1].index, 3);
}

}  // namespace
}  // namespace cohort::agent
