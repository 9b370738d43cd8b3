// WorkerLogWriter: per-attempt, per-rank files with rank prefixes, and the
// in-memory tail used for root-cause reports.
#include "agent/worker_logs.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

class WorkerLogs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("cohort-logs-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  static std::string read(const std::string& path) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
  std::filesystem::path root_;
};

TEST_F(WorkerLogs, WritesPrefixedLinesToOneFilePerRankAndAttempt) {
  auto writer = WorkerLogWriter::open((root_ / "run").string(), 2);
  ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
  ASSERT_TRUE((*writer)->write_line(3, "step 1 loss 2.5").is_ok());
  ASSERT_TRUE((*writer)->write_line(0, "hello").is_ok());
  ASSERT_TRUE((*writer)->write_line(3, "").is_ok());
  std::string rank3 = (root_ / "run/logs/attempt-2/rank-3.log").string();
  EXPECT_EQ((*writer)->path_for(3), rank3);
  // Flushed per line: readable before the writer closes.
  EXPECT_EQ(read(rank3), "[rank 3] step 1 loss 2.5\n[rank 3] \n");
  EXPECT_EQ(read((root_ / "run/logs/attempt-2/rank-0.log").string()), "[rank 0] hello\n");
}

TEST_F(WorkerLogs, KeepsTheLastLinesOfEachRank) {
  auto writer = WorkerLogWriter::open(root_.string(), 0, /*keep_lines=*/3).value();
  for (int i = 1; i <= 5; ++i)
    ASSERT_TRUE(writer->write_line(1, "line " + std::to_string(i)).is_ok());
  ASSERT_TRUE(writer->write_line(2, "other rank").is_ok());
  EXPECT_EQ(writer->last_lines(1, 10), (std::vector<std::string>{"line 3", "line 4", "line 5"}));
  EXPECT_EQ(writer->last_lines(1, 2), (std::vector<std::string>{"line 4", "line 5"}));
  EXPECT_EQ(writer->last_lines(2, 5), (std::vector<std::string>{"other rank"}));
  EXPECT_TRUE(writer->last_lines(7, 5).empty());
  // The file keeps everything.
  std::string text = read(writer->path_for(1));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
}

TEST_F(WorkerLogs, NamesTheDirectoryItCannotCreate) {
  std::filesystem::create_directories(root_);
  std::ofstream(root_ / "a-file") << "x";
  auto writer = WorkerLogWriter::open((root_ / "a-file").string(), 0);
  ASSERT_FALSE(writer.is_ok());
  EXPECT_NE(writer.status().message().find("a-file/logs/attempt-0"), std::string::npos)
      << writer.status().message();
}

TEST_F(WorkerLogs, KeepsLinesWholeUnderConcurrentWriters) {
  auto writer = WorkerLogWriter::open(root_.string(), 1).value();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        EXPECT_TRUE(
            writer->write_line(0, "thread " + std::to_string(t) + " line " + std::to_string(i))
                .is_ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::istringstream text(read(writer->path_for(0)));
  std::regex whole(R"(\[rank 0\] thread [0-3] line \d+)");
  int lines = 0;
  for (std::string line; std::getline(text, line); ++lines) {
    EXPECT_TRUE(std::regex_match(line, whole)) << line;
  }
  EXPECT_EQ(lines, 800);
}

}  // namespace
}  // namespace cohort::agent
