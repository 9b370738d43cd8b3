// command_line_job_toml: a torchrun-style command line as a job file.
#include "jobs/command_line_job.h"

#include <algorithm>
#include <filesystem>

namespace cohort::jobs {
namespace {

// A TOML basic string.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// The script's stem where one is named (python3 train.py → "train"), else
// the program's; only the characters a job name takes.
std::string job_name(const std::vector<std::string>& argv) {
  std::string from = argv.empty() ? "run" : argv[0];
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string ext = std::filesystem::path(argv[i]).extension().string();
    if (ext == ".py" || ext == ".sh") {
      from = argv[i];
      break;
    }
  }
  std::string name;
  for (char c : std::filesystem::path(from).stem().string()) {
    bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name += plain ? c : '-';
  }
  return name.empty() ? "run" : name.substr(0, 64);
}

}  // namespace

std::string command_line_job_toml(const std::vector<std::string>& argv, int nproc_per_node, int nnodes) {
  std::string text = "[job]\nname = " + quoted(job_name(argv)) + "\nkind = \"command\"\nnodes = " +
                     std::to_string(nnodes) + "\ngpus_per_node = " + std::to_string(nproc_per_node) +
                     "\n[command]\nargv = [";
  for (size_t i = 0; i < argv.size(); ++i) text += (i ? ", " : "") + quoted(argv[i]);
  return text + "]\n";
}

namespace {

// Whether `model` names a cohort checkpoint rather than a model folder.
bool is_checkpoint(const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(model);
  if (fs::is_regular_file(p, ec)) return p.filename() == "latest";
  if (!fs::is_directory(p, ec)) return false;
  if (fs::exists(p / "config.json", ec)) return false;  // a Hugging Face folder
  return fs::exists(p / "index.json", ec) || fs::exists(p / "latest", ec) ||
         fs::exists(p / "checkpoints", ec);
}

}  // namespace

std::string serve_job_toml(const ServeCommandLine& line) {
  const std::string name = "serve-" + job_name({line.model});
  std::string text = "[job]\nname = " + quoted(name) + "\nkind = \"serve\"\ngpus_per_node = " +
                     std::to_string(std::max(1, line.tensor_parallel)) + "\noutput_dir = " +
                     quoted("runs/" + name) + "\n[model]\n";
  text += (is_checkpoint(line.model) ? "checkpoint = " : "hf_dir = ") + quoted(line.model) + "\n";
  if (!line.adapter.empty()) text += "adapter = " + quoted(line.adapter) + "\n";
  text += "[serve]\n";
  text += "host = " + quoted(line.host.empty() ? "127.0.0.1" : line.host) + "\n";
  text += "port = " + std::to_string(line.port < 0 ? 8000 : line.port) + "\n";
  if (!line.api_key.empty()) text += "api_key = " + quoted(line.api_key) + "\n";
  if (!line.served_model_name.empty()) text += "model_name = " + quoted(line.served_model_name) + "\n";
  if (line.max_running > 0) text += "max_running = " + std::to_string(line.max_running) + "\n";
  if (line.context > 0) text += "context = " + std::to_string(line.context) + "\n";
  if (!line.lora_modules.empty()) {
    text += "[serve.adapters]\n";
    for (const std::string& module : line.lora_modules) {
      // NAME=DIR; a module without '=' keeps the whole text as the name, and
      // the job file's checks then name the folder that is not there.
      const size_t eq = module.find('=');
      const std::string name = eq == std::string::npos ? module : module.substr(0, eq);
      text += quoted(name) + " = " + quoted(eq == std::string::npos ? "" : module.substr(eq + 1)) + "\n";
    }
  }
  return text;
}

}  // namespace cohort::jobs
