// Loading a job file: TOML text → checked JobSpec.
//
// Every problem is collected, not just the first: wrong types, out-of-range
// values, unknown keys (with the nearest known key suggested), keys a kind
// requires, and rules that span fields. Each error carries the file (or the
// `--set` override it came from), line and column.
//
// Paths: a relative path of the job file (written in it, or a default:
// output_dir "runs/<name>", working_dir ".") resolves against the job file's
// folder, wherever cohort is started, so a job file and what it names move
// together; a path given with `--set` resolves against the current
// directory, like any other command-line argument. "~/" is the home folder.
// A loaded spec holds absolute paths only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::jobs {

// One `--set section.key=value` from the command line. The value is read as a
// TOML value (`3`, `1e-3`, `true`, `"x"`, `[1, 2]`); anything that does not
// parse as one is taken as a string, so `--set job.name=run7` works unquoted.
struct Override {
  std::string key;    // "train.lr", "job.env.NCCL_DEBUG"
  std::string value;  // as typed
  std::string text() const { return key + "=" + value; }
};
Result<Override> parse_override(const std::string& arg);

struct LoadError {
  std::string source;  // file path, or "--set train.lr=abc"
  int line = 0;        // 1-based; 0 when the error has no position
  int column = 0;
  std::string message;
  std::string to_string() const;  // "file:line:column: message"
};

struct LoadOptions {
  std::vector<Override> overrides;
  std::string base_dir;  // what --set paths are relative to; empty: the current directory
  std::string file_dir;  // what the file's paths are relative to; empty: base_dir (load_job_file: the file's folder)
};

struct LoadResult {
  JobSpec spec;                   // meaningful only when errors is empty
  std::vector<LoadError> errors;  // in file order, overrides last
  std::vector<std::string> warnings;  // e.g. a section the kind does not use
  // Where each given key sits, "file:line:column" ("train.data[1]" for the
  // entries of an array of data sources), for checks made after loading.
  std::map<std::string, std::string> key_positions;
  std::string position(const std::string& key) const;  // the file when unknown
  bool ok() const { return errors.empty(); }
  // All errors, one per line; empty when ok.
  std::string error_text() const;
};

LoadResult load_job_file(const std::string& path, const LoadOptions& options = {});
LoadResult load_job_text(const std::string& text, const std::string& source_name,
                         const LoadOptions& options = {});

// Every path a loaded job names, resolved, with the key and where it was
// given: what `cohort validate` prints and check_job_paths checks.
struct JobPath {
  enum class Use {
    kOutput,     // job.output_dir: created if missing, must not be a file
    kDirectory,  // job.working_dir: must be a directory
    kInput,      // data, model folders, checkpoint, prompts: must exist
    kProgram,    // command.argv[0]: a file, or found on PATH
    kScript,     // the script an interpreter in command.argv runs (python3 x.py)
  };
  std::string key;     // "train.data[0]", "command.argv[1]"
  std::string path;    // absolute ("" for a program not found on PATH)
  std::string origin;  // "job.toml:8:8", "--set job.output_dir=x", or "default"
  Use use = Use::kInput;
  std::string given;   // as written (a program's name)
};
std::vector<JobPath> job_paths(const LoadResult& result);

// Checks of the loaded job's paths against this machine's file system, kept
// apart from loading (which reads no files but the job file): output_dir is
// not a file, working_dir is a directory, inputs exist, the command's
// program and script are there. One message per problem, "origin: key:
// problem"; `cohort validate` and `cohort run` refuse the job, `cohort
// submit` warns (the nodes' file systems may differ from the submitting
// host's).
std::vector<std::string> check_job_paths(const LoadResult& result);

// The resolved spec as a complete job file (every key, defaults written out,
// absolute paths). Loading it again gives the same spec. This is what the
// coordinator stores and what agents hand to `cohort-worker`.
std::string to_toml(const JobSpec& spec);

}  // namespace cohort::jobs
