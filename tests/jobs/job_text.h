// Small helpers for job-file tests: load a string, find an error by text.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "jobs/load.h"

namespace cohort::jobs::testing {

inline LoadResult load(const std::string& text, std::vector<std::string> sets = {}) {
  LoadOptions options;
  options.base_dir = "/base";
  for (const auto& s : sets) options.overrides.push_back(*parse_override(s));
  return load_job_text(text, "job.toml", options);
}

// The one error whose message contains `needle`; fails the test otherwise.
inline LoadError error_with(const LoadResult& r, const std::string& needle) {
  int found = 0;
  LoadError hit;
  for (const auto& e : r.errors)
    if (e.message.find(needle) != std::string::npos) {
      ++found;
      hit = e;
    }
  EXPECT_EQ(found, 1) << "looking for '" << needle << "' in:\n" << r.error_text();
  return hit;
}

constexpr const char* kTrainJob = R"([job]
name = "t"
kind = "train"
gpus_per_node = 4
[model]
preset = "tiny"
[train]
data = "corpus.txt"
steps = 10
)";

}  // namespace cohort::jobs::testing
