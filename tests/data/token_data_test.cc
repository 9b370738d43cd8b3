// Data: text and token files, the held-out split, and a sampler whose global
// batch does not depend on the data-parallel world size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/token_data.h"

namespace cohort::data {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> stream(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = i;
  return t;
}

TEST(Data, TextFilesAndFoldersBecomeByteTokens) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_data_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "b.txt") << "b";
  std::ofstream(dir / "a.txt") << "A\xff";
  std::ofstream(dir / "sub" / "c.txt") << "c";
  auto one = read_text_bytes((dir / "a.txt").string());
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, (std::vector<int32_t>{65, 255}));
  auto all = read_text_bytes(dir.string());
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(*all, (std::vector<int32_t>{65, 255, 'b', 'c'}));
  EXPECT_FALSE(read_text_bytes((dir / "missing").string()).is_ok());
  fs::remove_all(dir);
}

TEST(Data, TokenFilesRoundTripInBothWidths) {
  const std::string path = (fs::temp_directory_path() / "cohort_tokens.bin").string();
  const std::vector<int32_t> tokens = {0, 1, 65535, 300};
  ASSERT_TRUE(write_token_file(path, tokens, TokenFormat::kUint16).is_ok());
  EXPECT_EQ(fs::file_size(path), 8u);
  EXPECT_EQ(*read_token_file(path, TokenFormat::kUint16), tokens);
  EXPECT_FALSE(write_token_file(path, {70000}, TokenFormat::kUint16).is_ok());
  ASSERT_TRUE(write_token_file(path, {70000, 151643}, TokenFormat::kUint32).is_ok());
  EXPECT_EQ(*read_token_file(path, TokenFormat::kUint32), (std::vector<int32_t>{70000, 151643}));
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_FALSE(read_token_file(path, TokenFormat::kUint16).is_ok());
  fs::remove(path);
}

TEST(Data, HeldOutSplitIsTheTail) {
  const TokenSplit s = split_held_out(stream(100), 0.1);
  EXPECT_EQ(s.train.size(), 90u);
  EXPECT_EQ(s.held_out.front(), 90);
}

TEST(Sampler, GlobalBatchDoesNotDependOnWorldSize) {
  const auto tokens = stream(2000);
  const SamplerOptions opt{8, 16, 42, true};
  auto reference = *BatchSampler::create(&tokens, opt);
  for (int64_t step : {0, 1, 7, 30}) {  // 30 crosses an epoch (124 windows / 8)
    std::vector<int32_t> want_in(8 * 16), want_tg(8 * 16);
    reference.fill(step, 0, 8, want_in.data(), want_tg.data());
    for (int world : {1, 2, 4, 8}) {
      std::vector<int32_t> got_in, got_tg;
      for (int rank = 0; rank < world; ++rank) {
        auto s = *BatchSampler::create(&tokens, opt);  // a separate sampler per rank
        std::vector<int32_t> in(8 / world * 16), tg(in.size());
        ASSERT_TRUE(s.fill_rank(step, rank, world, in.data(), tg.data()).is_ok());
        got_in.insert(got_in.end(), in.begin(), in.end());
        got_tg.insert(got_tg.end(), tg.begin(), tg.end());
      }
      EXPECT_EQ(got_in, want_in) << "world " << world << " step " << step;
      EXPECT_EQ(got_tg, want_tg);
    }
  }
  std::vector<int32_t> in(3 * 16), tg(3 * 16);
  EXPECT_FALSE(reference.fill_rank(0, 0, 3, in.data(), tg.data()).is_ok());
}

TEST(Sampler, TargetsAreNextTokensAndEpochsCoverEveryWindow) {
  const auto tokens = stream(161);  // 10 windows of 16 (+1)
  auto s = *BatchSampler::create(&tokens, SamplerOptions{5, 16, 1, true});
  std::vector<int32_t> in(10 * 16), tg(10 * 16);
  s.fill(0, 0, 5, in.data(), tg.data());
  s.fill(1, 0, 5, in.data() + 5 * 16, tg.data() + 5 * 16);
  std::vector<int> seen(10, 0);
  for (int q = 0; q < 10; ++q) {
    EXPECT_EQ(in[q * 16] % 16, 0);
    seen[in[q * 16] / 16]++;
    for (int t = 0; t < 16; ++t) EXPECT_EQ(tg[q * 16 + t], in[q * 16 + t] + 1);
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  std::vector<int32_t> next_epoch(5 * 16), unused(5 * 16);
  s.fill(2, 0, 5, next_epoch.data(), unused.data());
  EXPECT_NE(std::vector<int32_t>(next_epoch.begin(), next_epoch.end()),
            std::vector<int32_t>(in.begin(), in.begin() + 80));  // reshuffled
}

TEST(Sampler, StateSavesAndRestoresExactly) {
  const auto tokens = stream(1000);
  auto a = *BatchSampler::create(&tokens, SamplerOptions{4, 8, 9, true});
  for (int i = 0; i < 5; ++i) a.next_step();
  const std::string saved = a.state().to_json();
  auto b = *BatchSampler::create(&tokens, SamplerOptions{4, 8, 9, true});
  ASSERT_TRUE(b.restore(*SamplerState::from_json(saved)).is_ok());
  EXPECT_EQ(b.next_step(), a.next_step());
  std::vector<int32_t> ia(32), ta(32), ib(32), tb(32);
  a.fill(a.step(), 0, 4, ia.data(), ta.data());
  b.fill(b.step(), 0, 4, ib.data(), tb.data());
  EXPECT_EQ(ia, ib);
  auto other = *BatchSampler::create(&tokens, SamplerOptions{4, 8, 10, true});
  EXPECT_FALSE(other.restore(*SamplerState::from_json(saved)).is_ok());
  EXPECT_FALSE(SamplerState::from_json("{").is_ok());
  const std::vector<int32_t> few = stream(8);
  EXPECT_FALSE(BatchSampler::create(&few, SamplerOptions{4, 8, 0, true}).is_ok());
}

}  // namespace
}  // namespace cohort::data
