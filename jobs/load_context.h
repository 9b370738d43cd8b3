// Private to jobs/: what the loader knows while it checks one job file —
// where each key came from (file position or `--set`), which keys were given,
// and the errors found so far.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobs/load.h"

namespace cohort::jobs {

struct KeyOrigin {
  std::string source;
  int line = 0;
  int column = 0;
  bool from_override = false;
};

class LoadContext {
 public:
  explicit LoadContext(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  void note_key(const std::string& path, KeyOrigin origin) { origins_[path] = std::move(origin); }
  bool given(const std::string& path) const { return origins_.count(path) > 0; }
  bool from_override(const std::string& path) const {
    auto it = origins_.find(path);
    return it != origins_.end() && it->second.from_override;
  }
  // A given key whose value was rejected; rules that depend on it stay quiet.
  void mark_invalid(const std::string& path) { invalid_.insert(path); }
  bool valid(const std::string& path) const { return given(path) && !invalid_.count(path); }

  // An error at a key's position ("train.lr"), or at the file start if unknown.
  void error_at(const std::string& path, const std::string& message);
  void error_at(const KeyOrigin& origin, const std::string& message);
  void warn(const std::string& message) { warnings_.push_back(message); }

  std::vector<LoadError> take_errors();
  // "file:line:column" (or "--set ...") of every key given.
  std::map<std::string, std::string> positions() const {
    std::map<std::string, std::string> out;
    for (const auto& [k, o] : origins_)
      out[k] = o.line > 0 ? o.source + ":" + std::to_string(o.line) + ":" + std::to_string(o.column) : o.source;
    return out;
  }
  std::vector<std::string> take_warnings() { return std::move(warnings_); }

 private:
  std::string file_;
  std::map<std::string, KeyOrigin> origins_;
  std::set<std::string> invalid_;
  std::vector<LoadError> errors_;
  std::vector<std::string> warnings_;
};

// Cross-field rules, run after every key was read (checks.cc).
void check_job_rules(JobSpec& spec, LoadContext& ctx);
// Fills the defaults that depend on other fields and makes paths absolute:
// `--set` ones against `cwd`, the file's and the defaults against `file_dir`.
void resolve_defaults(JobSpec& spec, const LoadContext& ctx, const std::string& cwd, const std::string& file_dir);
// [model] hf_dir that is no folder (relative to `base`) but a Hugging Face
// model id becomes its snapshot folder in the local cache (hf/hub_cache.h);
// an id the cache lacks is an error saying where it looked.
void resolve_hub_model(JobSpec& spec, LoadContext& ctx, const std::string& base);

}  // namespace cohort::jobs
