// [model] hf_dir = "ORG/NAME": a model id found in the local Hugging Face
// cache (HF_HUB_CACHE), as the job loader resolves it; a folder of that
// name beside the job file wins; an id the cache lacks names where it looked.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "hf/hub_cache.h"
#include "jobs/load.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;

class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cohort_hub_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    cache_ = root_ / "cache";
    const fs::path repo = cache_ / "models--Qwen--Qwen3-0.6B";
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "snapshots" / "old");
    fs::create_directories(repo / "snapshots" / "c1f2e3");
    std::ofstream(repo / "refs" / "main") << "c1f2e3";
    ::setenv("HF_HUB_CACHE", cache_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("HF_HUB_CACHE");
    fs::remove_all(root_);
  }
  jobs::LoadResult load(const std::string& hf_dir) {
    const fs::path file = root_ / "job.toml";
    std::ofstream(file) << "[job]\nname = \"j\"\nkind = \"infer\"\n[model]\nhf_dir = \"" << hf_dir
                        << "\"\n[infer]\nprompts = \"p.jsonl\"\n";
    return jobs::load_job_file(file.string());
  }
  fs::path root_, cache_;
};

TEST_F(HubCache, AModelIdIsItsSnapshotFolderAsRefsMainNamesIt) {
  EXPECT_TRUE(looks_like_hub_id("Qwen/Qwen3-0.6B"));
  EXPECT_FALSE(looks_like_hub_id("./Qwen/Qwen3-0.6B"));
  EXPECT_FALSE(looks_like_hub_id("/models/qwen"));
  EXPECT_FALSE(looks_like_hub_id("a/b/c"));
  auto found = find_in_hub_cache("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(found.is_ok()) << found.status().message();
  EXPECT_EQ(*found, (cache_ / "models--Qwen--Qwen3-0.6B" / "snapshots" / "c1f2e3").string());
  auto loaded = load("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(loaded.ok()) << loaded.error_text();
  EXPECT_EQ(loaded.spec.model.hf_dir, *found);
}

TEST_F(HubCache, AFolderBesideTheJobFileWinsOverTheCache) {
  fs::create_directories(root_ / "Qwen" / "Qwen3-0.6B");
  auto loaded = load("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(loaded.ok()) << loaded.error_text();
  EXPECT_EQ(loaded.spec.model.hf_dir, (root_ / "Qwen" / "Qwen3-0.6B").string());
}

TEST_F(HubCache, AnIdTheCacheLacksIsAnErrorNamingWhereItLooked) {
  auto loaded = load("meta-llama/Llama-3.1-8B");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error_text().find("model.hf_dir"), std::string::npos) << loaded.error_text();
  EXPECT_NE(loaded.error_text().find((cache_ / "models--meta-llama--Llama-3.1-8B").string()), std::string::npos)
      << loaded.error_text();
  EXPECT_NE(loaded.error_text().find("never downloads"), std::string::npos);
}

}  // namespace
}  // namespace cohort::hf
