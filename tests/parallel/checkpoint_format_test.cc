// A checkpoint's piece lists: what write_piece_list writes reads back, and a
// damaged list is an error naming the file, never undefined behaviour.
#include "parallel/checkpoint_format.h"
#include "parallel/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cohort::parallel {
namespace {

namespace fs = std::filesystem;

class PieceList : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort_pieces_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PieceList, WhatIsWrittenReadsBack) {
  Piece p;
  p.param = "layers.0.w";
  p.tensor = PieceTensor::kMoment2;
  p.file = "rank-0.bin";
  p.file_offset = uint64_t(1) << 40;
  p.count = 12;
  p.local_begin = 4;
  p.shard_dim = models::ShardDim::kRows;
  p.shard_begin = 8;
  p.local_shape = {3, 4};
  ASSERT_TRUE(write_piece_list((dir_ / "rank-0.json").string(), {p}).is_ok());
  auto index = read_piece_index(dir_.string());
  ASSERT_TRUE(index) << index.status().message();
  const Piece& back = index->at("layers.0.w").at(0);
  EXPECT_EQ(back.tensor, PieceTensor::kMoment2);
  EXPECT_EQ(back.file_offset, p.file_offset);
  EXPECT_EQ(back.shard_dim, models::ShardDim::kRows);
  EXPECT_EQ(back.local_shape, p.local_shape);
}

TEST_F(PieceList, ANumberThatIsNoIntegerIsAnErrorNamingTheField) {
  // 4.4e128 as a uint64_t was undefined behaviour (found by the fuzzer).
  for (const char* offset : {"4.4e128", "1.5", "\"12\""}) {
    std::ofstream(dir_ / "rank-0.json")
        << R"({"pieces": [{"param": "w", "tensor": 0, "file": "rank-0.bin", "file_offset": )"
        << offset
        << R"(, "count": 1, "local_begin": 0, "shard_dim": 0, "shard_begin": 0, "local_shape": [1]}]})";
    auto index = read_piece_index(dir_.string());
    ASSERT_FALSE(index) << offset;
    EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(index.status().message().find("rank-0.json"), std::string::npos)
        << index.status().message();
  }
  std::ofstream(dir_ / "rank-0.json")
      << R"({"pieces": [{"param": "w", "tensor": 0, "file": "rank-0.bin", "file_offset": 0, )"
      << R"("count": 1, "local_begin": 0, "shard_dim": 0, "shard_begin": 0, "local_shape": [1e300]}]})";
  auto index = read_piece_index(dir_.string());
  ASSERT_FALSE(index);
  EXPECT_NE(index.status().message().find("local_shape is not an integer"), std::string::npos)
      << index.status().message();
}

}  // namespace
}  // namespace cohort::parallel

namespace cohort::parallel {
namespace {

// [model] checkpoint and `cohort export` take a checkpoint folder, a
// `latest` file, a folder of checkpoints, or a run's output_dir.
TEST(CheckpointPath, EveryWayOfNamingACheckpointResolvesToIt) {
  const fs::path run = fs::temp_directory_path() / ("cohort_ckpt_path_" + std::to_string(::getpid()));
  const fs::path root = run / "checkpoints", step = root / "step-00000020";
  fs::create_directories(step);
  std::ofstream(step / "index.json") << "{}";
  std::ofstream(root / "latest") << "step-00000020\n";
  EXPECT_EQ(resolve_checkpoint_path(step.string()), step.string());
  EXPECT_EQ(resolve_checkpoint_path((root / "latest").string()), step.string());
  EXPECT_EQ(resolve_checkpoint_path(root.string()), step.string());
  EXPECT_EQ(resolve_checkpoint_path(run.string()), step.string());
  EXPECT_EQ(resolve_checkpoint_path((run / "absent").string()), (run / "absent").string());
  fs::remove_all(run);
}

}  // namespace
}  // namespace cohort::parallel
