// [lora]: what it loads into, what it refuses (at the key's file:line:column),
// that it round-trips through to_toml only when given, that its module names
// are models/lora_config.h's, and that `cohort validate` prints the plan.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "models/lora_config.h"
#include "tests/jobs/job_text.h"

namespace cohort::jobs {
namespace {
using testing::error_with;
using testing::load;

std::string lora_job(const std::string& lora_lines) {
  return std::string(testing::kTrainJob) + "[lora]\n" + lora_lines;  // [lora] is line 10
}

TEST(LoraSection, LoadsPeftNamesAndDefaults) {
  auto r = load(lora_job(
      "rank = 16\nalpha = 32\ndropout = 0.05\ntarget_modules = [\"q_proj\", \"down_proj\"]\n"
      "use_rslora = true\ninit = \"gaussian\"\nbase_dtype = \"fp32\"\n"));
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.spec.has_lora);
  const LoraSection& l = r.spec.lora;
  EXPECT_EQ(l.rank, 16);
  EXPECT_DOUBLE_EQ(l.alpha, 32);
  EXPECT_DOUBLE_EQ(l.dropout, 0.05);
  EXPECT_EQ(l.target_modules, (std::vector<std::string>{"q_proj", "down_proj"}));
  EXPECT_TRUE(l.use_rslora);
  EXPECT_EQ(l.init, "gaussian");
  EXPECT_EQ(l.base_dtype, "fp32");

  auto defaults = load(lora_job(""));
  ASSERT_TRUE(defaults.ok()) << defaults.error_text();
  EXPECT_EQ(defaults.spec.lora.rank, 8);  // PEFT's r, lora_alpha and target modules for Llama/Qwen
  EXPECT_DOUBLE_EQ(defaults.spec.lora.alpha, 8);
  EXPECT_EQ(defaults.spec.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(defaults.spec.lora.init, "kaiming_uniform");
  EXPECT_EQ(defaults.spec.lora.base_dtype, "bf16");
}

TEST(LoraSection, AllLinearIsAStringOrTheOnlyEntryOfAList) {
  auto as_string = load(lora_job("target_modules = \"all-linear\"\n"));
  ASSERT_TRUE(as_string.ok()) << as_string.error_text();
  EXPECT_EQ(as_string.spec.lora.target_modules, (std::vector<std::string>{"all-linear"}));
  auto mixed = load(lora_job("target_modules = [\"q_proj\", \"all-linear\"]\n"));
  auto e =
      error_with(mixed, "lora.target_modules[1]: \"all-linear\" already names every projection");
  EXPECT_EQ(e.line, 11);
  EXPECT_EQ(e.column, 29);
}

TEST(LoraSection, UnknownModuleIsRefusedAtItsEntryWithTheNearestName) {
  auto r = load(lora_job("target_modules = [\"q_proj\", \"v_prj\"]\n"));
  auto e = error_with(
      r,
      "lora.target_modules[1]: unknown module \"v_prj\" (one of: q_proj, k_proj, v_proj, o_proj, "
      "gate_proj, up_proj, down_proj, or \"all-linear\"); did you mean \"v_proj\"?");
  EXPECT_EQ(e.to_string().rfind("job.toml:11:29: ", 0), 0u) << e.to_string();
  error_with(load(lora_job("target_modules = [\"q_proj\", \"q_proj\"]\n")),
             "lora.target_modules[1]: \"q_proj\" is named twice");
  error_with(load(lora_job("target_modules = []\n")),
             "lora.target_modules: name at least one module");
  error_with(load(lora_job("target_modules = 3\n")),
             "lora.target_modules: expected a string or an array of strings");
}

TEST(LoraSection, QuantizedBasesAreAcceptedAndOthersRefused) {
  for (const char* dtype : {"nf4", "fp8"}) {
    auto r = load(lora_job(std::string("base_dtype = \"") + dtype + "\"\n"));
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(r.spec.lora.base_dtype, dtype);
  }
  error_with(load(lora_job("base_dtype = \"int8\"\n")), "lora.base_dtype: unknown value \"int8\"");
  error_with(load(lora_job("base_dtype = \"nf4\"\n"), {"model.quantize=int4"}),
             "the base is quantized by lora.base_dtype alone");
}

TEST(LoraSection, RangesAndTypesAreChecked) {
  auto rank = error_with(load(lora_job("rank = 0\n")), "lora.rank: 0 is out of range");
  EXPECT_EQ(rank.line, 11);
  error_with(load(lora_job("alpha = 0\n")), "lora.alpha: 0 is out of range");
  error_with(load(lora_job("dropout = 1.0\n")), "lora.dropout: 1 is out of range");
  error_with(load(lora_job("init = \"normal\"\n")),
             "lora.init: unknown value \"normal\" (one of: kaiming_uniform, gaussian)");
  error_with(load(lora_job("rnak = 4\n")), "unknown key 'rnak' in [lora]; did you mean rank?");
  error_with(load(lora_job(""), {"lora.rank=abc"}), "lora.rank: expected an integer");
}

TEST(LoraSection, AdapterFolderSetsTheShapeSoShapeKeysWarn) {
  auto r = load(lora_job("adapter = \"adapters/run1\"\nrank = 4\ndropout = 0.1\n"));
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.lora.adapter, "/base/adapters/run1");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("lora.rank has no effect with lora.adapter"), std::string::npos)
      << r.warnings[0];
  bool listed = false;
  for (const auto& p : job_paths(r))
    listed = listed || (p.key == "lora.adapter" && p.path == "/base/adapters/run1");
  EXPECT_TRUE(listed) << "lora.adapter is an input path validate checks";
}

// [model] adapter: merged for inference and serving, an input path there,
// refused for training (which starts from one with lora.adapter).
TEST(LoraSection, AModelAdapterIsForInferenceAndServing) {
  auto serve = load("[job]\nname = \"s\"\nkind = \"serve\"\n[model]\nhf_dir = \"base\"\nadapter = \"adapters/run1\"\n");
  ASSERT_TRUE(serve.ok()) << serve.error_text();
  EXPECT_EQ(serve.spec.model.adapter, "/base/adapters/run1");
  bool listed = false;
  for (const auto& p : job_paths(serve))
    listed = listed || (p.key == "model.adapter" && p.path == "/base/adapters/run1");
  EXPECT_TRUE(listed) << "model.adapter is an input path validate checks";
  error_with(load(lora_job(""), {"model.adapter=adapters/run1"}),
             "model.adapter is merged for kind infer and serve, not \"train\"");
}

TEST(LoraSection, OtherKindsWarnThatItHasNoEffect) {
  auto r = load(
      "[job]\nname = \"i\"\nkind = \"infer\"\n[model]\npreset = \"tiny\"\n[infer]\nprompts = "
      "\"p.jsonl\"\n"
      "[lora]\nrank = 4\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("[lora] has no effect for kind = \"infer\""), std::string::npos);
  EXPECT_EQ(to_toml(r.spec).find("[lora]"), std::string::npos);
}

TEST(LoraSection, RoundTripsThroughToTomlOnlyWhenGiven) {
  auto with = load(lora_job("rank = 4\ntarget_modules = \"all-linear\"\n"));
  ASSERT_TRUE(with.ok()) << with.error_text();
  const std::string text = to_toml(with.spec);
  EXPECT_NE(text.find("[lora]"), std::string::npos);
  auto again = load_job_text(text, "resolved.toml", {});
  ASSERT_TRUE(again.ok()) << again.error_text() << text;
  EXPECT_TRUE(again.spec.has_lora);
  EXPECT_EQ(to_toml(again.spec), text);
  auto without = load(testing::kTrainJob);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(to_toml(without.spec).find("[lora]"), std::string::npos);
  EXPECT_FALSE(load_job_text(to_toml(without.spec), "resolved.toml", {}).spec.has_lora);
}

// jobs/ keeps its own list (it does not link models/): the two must agree.
TEST(LoraSection, AcceptsExactlyTheModulesTheModelAdapts) {
  std::string listed;
  for (models::LoraTarget t : models::kAllLoraTargets) {
    const std::string name = models::peft_module_name(t);
    listed += (listed.empty() ? "" : ", ") + name;
    auto r = load(lora_job("target_modules = [\"" + name + "\"]\n"));
    EXPECT_TRUE(r.ok()) << name << ": " << r.error_text();
  }
  error_with(load(lora_job("target_modules = [\"lm_head\"]\n")),
             "(one of: " + listed + ", or \"all-linear\")");
}

int run(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output->append(buffer, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(LoraSection, ValidatePrintsThePlanAndItsShareOfTheModel) {
  const std::string cohort = std::string(COHORT_BINARY_DIR) + "/bin/cohort";
  ASSERT_TRUE(std::filesystem::exists(cohort)) << cohort << " is not built";
  const auto dir = std::filesystem::temp_directory_path() / "cohort_lora_validate";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << "some text to train on\n";
  std::ofstream(dir / "job.toml")
      << "[job]\nname = \"l\"\nkind = \"train\"\n[model]\npreset = \"tiny\"\n[train]\n"
         "data = \"corpus.txt\"\nsteps = 2\nseq_len = 16\n[lora]\nrank = 4\nalpha = 8\n"
         "target_modules = \"all-linear\"\n";
  std::string out;
  ASSERT_EQ(run(cohort + " validate " + (dir / "job.toml").string(), &out), 0) << out;
  EXPECT_NE(out.find("lora: rank 4, alpha 8 (scale 2), dropout 0 on q_proj, k_proj, v_proj, "
                     "o_proj, gate_proj, "
                     "up_proj, down_proj; A kaiming_uniform, B zero; frozen base bf16"),
            std::string::npos)
      << out;
  // tiny: 2 layers × 4 × (q 64+128 + k 64+64 + v 64+64 + o 128+64 + gate 64+128 + up 64+128 + down
  // 128+64).
  EXPECT_NE(out.find("lora: 9728 trainable parameters in 2 layers"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(
      run(cohort + " validate " + (dir / "job.toml").string() + " --set lora.base_dtype=nf4", &out),
      0)
      << out;
  EXPECT_NE(out.find("frozen base nf4"), std::string::npos) << out;
  // With an adapter folder, its adapter_config.json sets the shape.
  std::filesystem::create_directories(dir / "adapter");
  std::ofstream(dir / "adapter" / "adapter_config.json")
      << R"({"peft_type": "LORA", "r": 6, "lora_alpha": 12, "target_modules": ["v_proj", "q_proj"]})";
  out.clear();
  ASSERT_EQ(run(cohort + " validate " + (dir / "job.toml").string() +
                    " --set lora.adapter=" + (dir / "adapter").string(),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("lora: rank 6, alpha 12 (scale 2), dropout 0 on q_proj, v_proj"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("starting from the adapters in " + (dir / "adapter").string()),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace cohort::jobs
