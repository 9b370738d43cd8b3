// Format names, detection and probing.
#include "data/data_format.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/shard_format.h"

namespace cohort::data {
namespace fs = std::filesystem;

const char* format_name(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kText: return "text";
    case DataFormat::kJsonl: return "jsonl";
    case DataFormat::kChat: return "chat";
    case DataFormat::kPromptCompletion: return "prompt_completion";
    case DataFormat::kNanoGpt: return "nanogpt";
    case DataFormat::kU32: return "u32";
    case DataFormat::kMegatron: return "megatron";
    case DataFormat::kCohort: return "cohort";
  }
  return "?";
}

Result<DataFormat> parse_format(const std::string& name) {
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kText, DataFormat::kJsonl, DataFormat::kChat,
                       DataFormat::kPromptCompletion, DataFormat::kNanoGpt, DataFormat::kU32, DataFormat::kMegatron,
                       DataFormat::kCohort})
    if (name == format_name(f)) return f;
  if (name == "u16") return DataFormat::kNanoGpt;
  return invalid_argument("unknown data format \"" + name + "\"");
}

bool is_token_format(DataFormat f) {
  return f == DataFormat::kNanoGpt || f == DataFormat::kU32 || f == DataFormat::kMegatron || f == DataFormat::kCohort;
}

namespace {

std::string head_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string buf(n, '\0');
  in.read(buf.data(), std::streamsize(n));
  buf.resize(size_t(in.gcount()));
  return buf;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The first non-blank line of a text file and its number (0 when none).
std::pair<std::string, int> first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find_first_not_of(" \t\r") != std::string::npos) return {line, n};
  return {"", 0};
}

DataFormat jsonl_kind(const nlohmann::json& j, const std::string& text_field) {
  if (j.contains("messages")) return DataFormat::kChat;
  if (j.contains("prompt") && j.contains("completion")) return DataFormat::kPromptCompletion;
  if (j.contains(text_field)) return DataFormat::kJsonl;
  return DataFormat::kAuto;
}

}  // namespace

Status check_json_line(const std::string& line, DataFormat format, const std::string& text_field) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("not valid JSON");
  if (!j.is_object()) return invalid_argument("expected a JSON object");
  auto string_field = [&](const std::string& key) -> Status {
    if (!j.contains(key)) return invalid_argument("no \"" + key + "\" field");
    if (!j[key].is_string()) return invalid_argument("\"" + key + "\" is not a string");
    return Status::ok();
  };
  switch (format) {
    case DataFormat::kJsonl: return string_field(text_field);
    case DataFormat::kPromptCompletion:
      COHORT_RETURN_IF_ERROR(string_field("prompt"));
      return string_field("completion");
    case DataFormat::kChat: {
      if (!j.contains("messages") || !j["messages"].is_array()) return invalid_argument("no \"messages\" array");
      if (j["messages"].empty()) return invalid_argument("\"messages\" is empty");
      int k = 0;
      bool assistant = false;
      for (const auto& m : j["messages"]) {
        const std::string at = "messages[" + std::to_string(k++) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          return invalid_argument(at + " has no \"role\" string");
        // The roles chat templates know (as the OpenAI API names them): a
        // typo ("asistant") or another dialect ("human") would render as
        // something else, or not at all, and train on the wrong tokens.
        const std::string role = m["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
          return invalid_argument(at + ".role \"" + role.substr(0, 64) +
                                  "\" is not a chat role (system, user, assistant, tool or developer)");
        if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null() && !m["content"].is_array())
          return invalid_argument(at + ".content is not a string");
        assistant = assistant || m["role"] == "assistant";
      }
      if (!assistant) return invalid_argument("no assistant message (nothing to train on)");
      return Status::ok();
    }
    default: return Status::ok();
  }
}

Result<DataFormat> detect_format(const std::string& path, const std::string& text_field) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path + ": no such file or folder");
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "index.json", ec)) return DataFormat::kCohort;
    return DataFormat::kText;  // a folder of documents
  }
  const std::string head = head_bytes(path, 16);
  if (head.size() >= 8 && std::memcmp(head.data(), kShardMagic, 8) == 0) return DataFormat::kCohort;
  if (head.size() >= 9 && std::memcmp(head.data(), "MMIDIDX\0\0", 9) == 0) return DataFormat::kMegatron;
  if (ends_with(path, ".bin")) {
    const std::string idx = path.substr(0, path.size() - 4) + ".idx";
    if (fs::exists(idx, ec) && head_bytes(idx, 9) == std::string("MMIDIDX\0\0", 9)) return DataFormat::kMegatron;
    return DataFormat::kNanoGpt;  // header-less: only the extension says so
  }
  if (ends_with(path, ".u16")) return DataFormat::kNanoGpt;
  if (ends_with(path, ".u32")) return DataFormat::kU32;
  if (ends_with(path, ".idx")) return DataFormat::kMegatron;
  const auto [line, n] = first_line(path);
  if (!line.empty() && line.find_first_not_of(" \t") != std::string::npos && line[line.find_first_not_of(" \t")] == '{') {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      const DataFormat f = jsonl_kind(j, text_field);
      if (f == DataFormat::kAuto)
        return invalid_argument(path + ":" + std::to_string(n) + ": JSONL with none of \"" + text_field +
                                "\", \"messages\" or \"prompt\"/\"completion\" (set train.text_field, or data_format)");
      return f;
    }
  }
  return DataFormat::kText;
}

Result<DataFormat> probe_data(const std::string& path, DataFormat format, const std::string& text_field) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path + ": no such file or folder");
  if (format == DataFormat::kAuto) { COHORT_ASSIGN_OR_RETURN(format, detect_format(path, text_field)); }
  const bool dir = fs::is_directory(path, ec);
  switch (format) {
    case DataFormat::kCohort: {
      const std::string file = dir ? "" : path;
      if (dir) {
        std::ifstream in(fs::path(path) / "index.json");
        const auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_object() || j.value("format", "") != kShardFolderFormat)
          return invalid_argument(path + "/index.json: not a " + std::string(kShardFolderFormat) + " index");
        return format;
      }
      const std::string head = head_bytes(file, 64);
      std::error_code size_ec;
      const auto size = fs::file_size(file, size_ec);
      COHORT_RETURN_IF_ERROR(status_of(parse_shard_header(reinterpret_cast<const uint8_t*>(head.data()), head.size() < 64 ? head.size() : size, file)));
      return format;
    }
    case DataFormat::kNanoGpt:
    case DataFormat::kU32: {
      if (dir) return invalid_argument(path + ": a folder, not a token file");
      const auto size = fs::file_size(path, ec);
      const size_t w = format == DataFormat::kNanoGpt ? 2 : 4;
      if (ec || size == 0 || size % w != 0)
        return invalid_argument(path + ": " + std::to_string(size) + " bytes is not a whole number of " +
                                std::to_string(w) + "-byte tokens");
      return format;
    }
    case DataFormat::kMegatron: {
      std::string prefix = path;
      if (ends_with(prefix, ".bin") || ends_with(prefix, ".idx")) prefix.resize(prefix.size() - 4);
      if (head_bytes(prefix + ".idx", 9) != std::string("MMIDIDX\0\0", 9))
        return invalid_argument(prefix + ".idx: missing or not a Megatron index (MMIDIDX header)");
      if (!fs::exists(prefix + ".bin", ec)) return not_found(prefix + ".bin: missing (the Megatron tokens)");
      return format;
    }
    case DataFormat::kJsonl:
    case DataFormat::kChat:
    case DataFormat::kPromptCompletion: {
      if (dir) return invalid_argument(path + ": a folder; JSONL data is one file per source");
      std::ifstream in(path);
      if (!in) return errno_error("reading " + path);
      std::string line;
      int checked = 0;
      for (int n = 1; checked < 8 && std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        ++checked;
        Status s = check_json_line(line, format, text_field);
        if (!s.is_ok()) return invalid_argument(path + ":" + std::to_string(n) + ": " + s.message());
      }
      if (checked == 0) return invalid_argument(path + ": no lines");
      return format;
    }
    case DataFormat::kText: {
      if (!dir) {
        std::ifstream in(path);
        if (!in) return errno_error("reading " + path);
      }
      return format;
    }
    case DataFormat::kAuto: break;
  }
  return format;
}

}  // namespace cohort::data
