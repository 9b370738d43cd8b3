// Jobs for the control plane's tests, made as a client makes them: a few
// lines of TOML through the job file's loader (so every default is what a
// real file gets), returned as the spec. A test may change the spec; what it
// submits or launches is jobs::to_toml(spec), the resolved file.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "jobs/load.h"

namespace cohort::jobs::testing {

inline JobSpec loaded_spec(const std::string& text) {
  const LoadOptions options{.overrides = {}, .base_dir = "/", .file_dir = "/"};
  LoadResult r = load_job_text(text, "test-job.toml", options);
  EXPECT_TRUE(r.ok()) << r.error_text() << "in:\n" << text;
  return r.spec;
}

inline std::string job_section(const std::string& name, const char* kind, int nodes,
                               int gpus_per_node) {
  return "[job]\nname = \"" + name + "\"\nkind = \"" + kind +
         "\"\nnodes = " + std::to_string(nodes) +
         "\ngpus_per_node = " + std::to_string(gpus_per_node) + "\noutput_dir = \"/tmp/" + name +
         "\"\nworking_dir = \"/tmp\"\n";
}

// `true` on every rank, in /tmp/<name>.
inline JobSpec command_job(const std::string& name, int nodes, int gpus_per_node) {
  return loaded_spec(job_section(name, "command", nodes, gpus_per_node) +
                     "[command]\nargv = [\"true\"]\n");
}

// The tiny preset on a corpus that need not exist (nothing here reads it).
inline JobSpec train_job(const std::string& name, int nodes, int gpus_per_node) {
  return loaded_spec(
      job_section(name, "train", nodes, gpus_per_node) +
      "[model]\npreset = \"tiny\"\n[train]\ndata = \"/tmp/corpus.txt\"\nsteps = 10\n");
}

}  // namespace cohort::jobs::testing
