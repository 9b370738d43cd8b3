// A LoRA checkpoint's index entry reads back to the adapters' config and the
// base's source, and a resume is refused across kinds (full model / LoRA)
// and across adapters that compute something else, saying which.
#include <gtest/gtest.h>

#include "parallel/lora_checkpoint.h"

namespace cohort::parallel {
namespace {

models::LoraConfig adapters() {
  models::LoraConfig l;
  l.rank = 8, l.alpha = 16, l.dropout = 0.1, l.use_rslora = true;
  l.targets = {models::LoraTarget::kQ, models::LoraTarget::kUp};
  return l;
}

TEST(LoraCheckpoint, TheIndexEntryReadsBack) {
  const nlohmann::json index = {{"lora", lora_index_entry(adapters(), {"/models/qwen3", "", 5})}};
  auto read = read_lora_entry(index, "ckpt");
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  ASSERT_TRUE(read->has_value());
  const LoraCheckpoint& saved = **read;
  EXPECT_EQ(saved.lora.rank, 8);
  EXPECT_EQ(saved.lora.targets, adapters().targets);
  EXPECT_FLOAT_EQ(saved.lora.scale(), adapters().scale());
  EXPECT_EQ(saved.lora.base_dtype, DType::kBF16);
  EXPECT_EQ(saved.base.hf_dir, "/models/qwen3");
  auto none = read_lora_entry(nlohmann::json::object(), "ckpt");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
  auto broken = read_lora_entry({{"lora", {{"rank", "eight"}}}}, "ckpt");
  EXPECT_NE(broken.status().message().find("ckpt/index.json: lora"), std::string::npos);
}

TEST(LoraCheckpoint, AResumeKeepsTheKindAndWhatTheAdaptersCompute) {
  const LoraCheckpoint saved{adapters(), {}};
  const models::LoraConfig same = adapters();
  EXPECT_TRUE(check_resumable("ckpt", saved, &same).is_ok());
  models::LoraConfig other_dropout = adapters();
  other_dropout.dropout = 0.3;
  EXPECT_TRUE(check_resumable("ckpt", saved, &other_dropout).is_ok())
      << "dropout is the run's to change";
  EXPECT_NE(check_resumable("ckpt", saved, nullptr).message().find("ckpt holds LoRA adapters"),
            std::string::npos);
  EXPECT_NE(check_resumable("ckpt", std::nullopt, &same)
                .message()
                .find("ckpt is a full-model checkpoint"),
            std::string::npos);
  for (auto change : {+[](models::LoraConfig& l) { l.rank = 4; },
                      +[](models::LoraConfig& l) { l.targets.pop_back(); },
                      +[](models::LoraConfig& l) { l.alpha = 32; },
                      +[](models::LoraConfig& l) { l.base_dtype = DType::kF32; }}) {
    models::LoraConfig job = adapters();
    change(job);
    const Status s = check_resumable("ckpt", saved, &job);
    EXPECT_NE(s.message().find("must match to resume"), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(check_resumable("ckpt", std::nullopt, nullptr).is_ok());
}

}  // namespace
}  // namespace cohort::parallel
