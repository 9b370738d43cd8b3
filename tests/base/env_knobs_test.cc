// The COHORT_* table: read through one function, and docs/gpus-and-performance.md
// lists exactly what the table says.
#include "base/env_knobs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cohort {
namespace {

TEST(EnvKnobs, TheTableIsInEnumOrderAndEveryNameIsCohorts) {
  const auto& table = env_knobs();
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(table[i].knob), i) << table[i].name;
    EXPECT_EQ(std::string(table[i].name).rfind("COHORT_", 0), 0u) << table[i].name;
  }
}

TEST(EnvKnobs, UnsetAndEmptyReadAsAbsentAndOnlyOneIsOn) {
  ::unsetenv("COHORT_INFER_DUMP_LOGITS");
  EXPECT_EQ(read_env_knob(EnvKnob::kInferDumpLogits), nullptr);
  ::setenv("COHORT_INFER_DUMP_LOGITS", "", 1);
  EXPECT_EQ(read_env_knob(EnvKnob::kInferDumpLogits), nullptr);
  ::setenv("COHORT_INFER_DUMP_LOGITS", "yes", 1);
  EXPECT_STREQ(read_env_knob(EnvKnob::kInferDumpLogits), "yes");
  EXPECT_FALSE(env_knob_on(EnvKnob::kInferDumpLogits));
  ::setenv("COHORT_INFER_DUMP_LOGITS", "1", 1);
  EXPECT_TRUE(env_knob_on(EnvKnob::kInferDumpLogits));
  ::unsetenv("COHORT_INFER_DUMP_LOGITS");
}

TEST(EnvKnobs, ACountIsDigitsThatFitAnIntAndAnythingElseIsNamedInTheError) {
  const EnvKnob knob = EnvKnob::kInferFusedAttentionRows;
  ::unsetenv("COHORT_INFER_FUSED_ATTENTION_ROWS");
  auto absent = read_env_knob_count(knob);
  ASSERT_TRUE(absent.is_ok());
  EXPECT_FALSE(absent->has_value());
  ::setenv("COHORT_INFER_FUSED_ATTENTION_ROWS", "16", 1);
  auto sixteen = read_env_knob_count(knob);
  ASSERT_TRUE(sixteen.is_ok());
  EXPECT_EQ(**sixteen, 16);
  for (const char* bad : {"eight", "8 rows", "-1", "99999999999"}) {
    ::setenv("COHORT_INFER_FUSED_ATTENTION_ROWS", bad, 1);
    auto r = read_env_knob_count(knob);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("COHORT_INFER_FUSED_ATTENTION_ROWS='") + bad + "'"),
              std::string::npos)
        << r.status().message();
  }
  ::unsetenv("COHORT_INFER_FUSED_ATTENTION_ROWS");
}

TEST(EnvKnobs, TheDocsListExactlyTheTable) {
  std::ifstream in(std::filesystem::path(COHORT_SOURCE_DIR) / "docs/gpus-and-performance.md");
  ASSERT_TRUE(in) << "docs/gpus-and-performance.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string table = env_knobs_markdown();
  EXPECT_NE(text.str().find(table), std::string::npos)
      << "docs/gpus-and-performance.md's environment table differs from base/env_knobs.cc; "
         "it should read:\n"
      << table;
}

}  // namespace
}  // namespace cohort
