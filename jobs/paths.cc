// The paths a loaded job names: which keys hold them, resolved, and checked
// against this machine's file system (load.h: JobPath, check_job_paths).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "jobs/load.h"

namespace cohort::jobs {
namespace {

namespace fs = std::filesystem;

// Interpreters whose first argument that is not an option is a script file,
// and the options after which the program comes inline instead (no file).
bool is_interpreter(const std::string& program, std::vector<std::string>* inline_options) {
  std::string name = fs::path(program).filename().string();
  auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("python")) return *inline_options = {"-c", "-m"}, true;
  if (name == "sh" || name == "bash" || name == "dash" || name == "zsh") return *inline_options = {"-c"}, true;
  if (name == "perl" || name == "ruby" || name == "node") return *inline_options = {"-e", "-E"}, true;
  if (name == "Rscript") return *inline_options = {"-e"}, true;
  if (name == "julia") return *inline_options = {"-e", "-E"}, true;
  return false;
}

// `name` on the PATH the workers get (the job's own, else this process's).
std::string find_on_path(const std::string& name, const JobSpec& spec) {
  auto it = spec.job.env.find("PATH");
  const char* env = std::getenv("PATH");
  std::string path = it != spec.job.env.end() ? it->second : env ? env : "/usr/bin:/bin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal().string();
  }
  return "";
}

std::string resolve_in(const std::string& dir, const std::string& given) {
  fs::path p(given);
  return (p.is_absolute() ? p : fs::path(dir) / p).lexically_normal().string();
}

void command_paths(const LoadResult& result, std::vector<JobPath>* out) {
  const JobSpec& spec = result.spec;
  const auto& argv = spec.command.argv;
  if (spec.job.kind != JobKind::kCommand || argv.empty()) return;
  auto origin = [&](size_t i) { return result.position("command.argv[" + std::to_string(i) + "]"); };
  const std::string& program = argv[0];
  std::string resolved = program.find('/') != std::string::npos ? resolve_in(spec.job.working_dir, program)
                                                               : find_on_path(program, spec);
  out->push_back({"command.argv[0]", resolved, origin(0), JobPath::Use::kProgram, program});
  std::vector<std::string> inline_options;
  if (!is_interpreter(program, &inline_options)) return;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (std::find(inline_options.begin(), inline_options.end(), arg) != inline_options.end()) return;
    if (arg.empty() || arg[0] == '-') continue;
    out->push_back({"command.argv[" + std::to_string(i) + "]", resolve_in(spec.job.working_dir, arg), origin(i),
                    JobPath::Use::kScript, arg});
    return;
  }
}

}  // namespace

std::vector<JobPath> job_paths(const LoadResult& result) {
  const JobSpec& spec = result.spec;
  auto origin = [&](const std::string& key) {
    return result.key_positions.count(key) ? result.position(key) : std::string("default");
  };
  using Use = JobPath::Use;
  std::vector<JobPath> out;
  out.push_back({"job.output_dir", spec.job.output_dir, origin("job.output_dir"), Use::kOutput, ""});
  out.push_back({"job.working_dir", spec.job.working_dir, origin("job.working_dir"), Use::kDirectory, ""});
  if (spec.job.kind != JobKind::kCommand) {
    if (!spec.model.hf_dir.empty()) out.push_back({"model.hf_dir", spec.model.hf_dir, origin("model.hf_dir"), Use::kInput, ""});
    if (!spec.model.checkpoint.empty())
      out.push_back({"model.checkpoint", spec.model.checkpoint, origin("model.checkpoint"), Use::kInput, ""});
    if (!spec.model.adapter.empty())
      out.push_back({"model.adapter", spec.model.adapter, origin("model.adapter"), Use::kInput, ""});
  }
  if (spec.job.kind == JobKind::kTrain) {
    for (size_t i = 0; i < spec.train.data.size(); ++i) {
      std::string key = "train.data[" + std::to_string(i) + "]";
      std::string at = result.key_positions.count(key) ? result.position(key) : origin("train.data");
      out.push_back({key, spec.train.data[i].path, at, Use::kInput, ""});
    }
  }
  if (spec.job.kind == JobKind::kTrain && spec.has_lora && !spec.lora.adapter.empty())
    out.push_back({"lora.adapter", spec.lora.adapter, origin("lora.adapter"), Use::kInput, ""});
  if (spec.job.kind == JobKind::kServe) {
    for (const auto& [name, folder] : spec.serve.adapters) {
      const std::string key = "serve.adapters." + name;
      out.push_back({key, folder, result.key_positions.count(key) ? result.position(key) : origin("serve.adapters"),
                     Use::kInput, ""});
    }
  }
  if (spec.job.kind == JobKind::kInfer && !spec.infer.prompts.empty())
    out.push_back({"infer.prompts", spec.infer.prompts, origin("infer.prompts"), Use::kInput, ""});
  command_paths(result, &out);
  return out;
}

std::vector<std::string> check_job_paths(const LoadResult& result) {
  std::vector<std::string> problems;
  std::error_code ec;
  for (const auto& p : job_paths(result)) {
    std::string problem;
    switch (p.use) {
      case JobPath::Use::kOutput:
        if (fs::exists(p.path, ec) && !fs::is_directory(p.path, ec)) problem = p.path + " exists and is not a directory";
        break;
      case JobPath::Use::kDirectory:
        if (!fs::is_directory(p.path, ec))
          problem = p.path + (fs::exists(p.path, ec) ? " is not a directory" : " does not exist");
        break;
      case JobPath::Use::kInput:
      case JobPath::Use::kScript:
        if (!fs::exists(p.path, ec)) problem = p.path + " does not exist";
        break;
      case JobPath::Use::kProgram:
        if (p.path.empty()) problem = "program '" + p.given + "' is not on PATH";
        else if (!fs::exists(p.path, ec)) problem = p.path + " does not exist";
        else if (::access(p.path.c_str(), X_OK) != 0) problem = p.path + " is not executable";
        break;
    }
    if (problem.empty()) continue;
    std::string at = p.origin == "default" ? result.spec.source_path : p.origin;
    problems.push_back(at + ": " + p.key + ": " + problem);
  }
  return problems;
}

}  // namespace cohort::jobs
