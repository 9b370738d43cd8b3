// Reading a model folder's side files (see model_folder.h).
#include "hf/model_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hf/config_json.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A JSON object file; null when absent.
Result<json> read_object(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return json();
  const auto size = fs::file_size(path, ec);
  if (ec) return io_error("cannot stat " + path.string() + ": " + ec.message());
  if (size > ModelFolder::kMaxJsonBytes)
    return invalid_argument(path.string() + " is " + std::to_string(size) + " bytes, beyond the limit of " +
                            std::to_string(ModelFolder::kMaxJsonBytes));
  std::ifstream in(path);
  if (!in) return io_error("cannot read " + path.string());
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

// bos_token / eos_token: a string, or {"content": ...} as AddedToken dumps.
std::string token_text(const json& j, const char* key) {
  if (!j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// eos_token_id: a number or a list of numbers; ids outside int32 are dropped.
std::vector<int32_t> id_list(const json& j, const char* key) {
  std::vector<int32_t> ids;
  if (!j.is_object() || !j.contains(key)) return ids;
  auto add = [&](const json& v) {
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX)
      ids.push_back(int32_t(v.get<int64_t>()));
  };
  const json& v = j[key];
  if (v.is_array())
    for (const json& x : v) add(x);
  else
    add(v);
  return ids;
}

}  // namespace

Result<ModelFolder> ModelFolder::open(const std::string& dir) {
  ModelFolder f;
  f.dir_ = dir;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return not_found(dir + " is not a folder");
  COHORT_ASSIGN_OR_RETURN(json tokenizer_config, read_object(root / "tokenizer_config.json"));
  COHORT_ASSIGN_OR_RETURN(json generation, read_object(root / "generation_config.json"));
  COHORT_ASSIGN_OR_RETURN(json config, read_object(root / "config.json"));
  std::string template_source;
  if (tokenizer_config.is_object()) {
    f.bos_token_ = token_text(tokenizer_config, "bos_token");
    f.eos_token_ = token_text(tokenizer_config, "eos_token");
    if (tokenizer_config.contains("add_bos_token") && tokenizer_config["add_bos_token"].is_boolean())
      f.add_bos_ = tokenizer_config["add_bos_token"].get<bool>();
    if (tokenizer_config.contains("add_eos_token") && tokenizer_config["add_eos_token"].is_boolean())
      f.add_eos_ = tokenizer_config["add_eos_token"].get<bool>();
    if (tokenizer_config.contains("chat_template")) {
      const json& t = tokenizer_config["chat_template"];
      if (t.is_string()) template_source = t.get<std::string>();
      else if (t.is_array())
        for (const json& named : t)
          if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
              named["template"].is_string())
            template_source = named["template"].get<std::string>();
    }
  }
  if (template_source.empty() && is_file(root / "chat_template.jinja")) {
    const auto size = fs::file_size(root / "chat_template.jinja", ec);
    if (!ec && size > kMaxJsonBytes)
      return invalid_argument((root / "chat_template.jinja").string() + " is beyond the limit of " +
                              std::to_string(kMaxJsonBytes) + " bytes");
    std::ifstream in(root / "chat_template.jinja");
    template_source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!template_source.empty()) {
    COHORT_ASSIGN_OR_RETURN(f.chat_, ChatFormat::create(template_source, f.bos_token_, f.eos_token_, dir));
  }
  f.config_eos_ = id_list(generation, "eos_token_id");
  if (f.config_eos_.empty()) f.config_eos_ = id_list(config, "eos_token_id");
  return f;
}

bool ModelFolder::has_model_config() const { return is_file(fs::path(dir_) / "config.json"); }

Result<models::ModelConfig> ModelFolder::model_config(int max_seq_cap) const {
  return load_config_json(dir_, max_seq_cap);
}

bool ModelFolder::has_tokenizer() const {
  return is_file(fs::path(dir_) / "tokenizer.json") || is_file(fs::path(dir_) / "tokenizer.model");
}

std::string ModelFolder::tokenizer_source() const {
  return (is_file(fs::path(dir_) / "tokenizer.json") ? "tokenizer.json of " : "tokenizer.model of ") + dir_;
}

Result<std::unique_ptr<text::Tokenizer>> ModelFolder::open_tokenizer() const {
  const fs::path json_path = fs::path(dir_) / "tokenizer.json";
  if (is_file(json_path)) {
    COHORT_ASSIGN_OR_RETURN(auto bpe, text::BpeTokenizer::load(json_path.string()));
    return std::unique_ptr<text::Tokenizer>(std::move(bpe));
  }
  const fs::path sp_path = fs::path(dir_) / "tokenizer.model";
  if (!is_file(sp_path)) return not_found("no tokenizer.json or tokenizer.model in " + dir_);
  return text::load_sentencepiece(sp_path.string(), add_bos_, add_eos_);
}

std::vector<int32_t> ModelFolder::stop_ids(const text::Tokenizer* tokenizer) const {
  std::vector<int32_t> ids = config_eos_;
  if (tokenizer && !eos_token_.empty())
    if (auto id = tokenizer->token_id(eos_token_); id && std::find(ids.begin(), ids.end(), *id) == ids.end())
      ids.push_back(*id);
  return ids;
}

std::optional<int32_t> ModelFolder::document_eos(const text::Tokenizer& tokenizer, int vocab) const {
  std::optional<int32_t> eos;
  if (!eos_token_.empty()) eos = tokenizer.token_id(eos_token_);
  if (!eos && !config_eos_.empty()) eos = config_eos_.front();
  if (eos && (*eos < 0 || *eos >= vocab)) eos.reset();
  return eos;
}

const std::vector<std::string>& ModelFolder::side_files() {
  static const std::vector<std::string> files = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json",
      "merges.txt",     "added_tokens.json",     "chat_template.jinja",     "generation_config.json"};
  return files;
}

Status export_side_files(const std::string& from, const std::string& to, const nlohmann::json& config) {
  std::error_code ec;
  for (const std::string& f : ModelFolder::side_files()) {
    if (from.empty() || !is_file(fs::path(from) / f)) continue;
    fs::copy_file(fs::path(from) / f, fs::path(to) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return io_error("copying " + from + "/" + f + " to " + to + ": " + ec.message());
  }
  if (is_file(fs::path(to) / "generation_config.json")) return Status::ok();
  json gen = {{"_from_model_config", true}, {"transformers_version", "4.56.0"}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.is_object() && config.contains(key) && !config[key].is_null()) gen[key] = config[key];
  if (!from.empty()) {
    auto folder = ModelFolder::open(from);
    auto tokenizer = folder ? folder->open_tokenizer() : Result<std::unique_ptr<text::Tokenizer>>(folder.status());
    if (folder && tokenizer) {
      if (auto id = (*tokenizer)->token_id(folder->eos_token()); id && !gen.contains("eos_token_id")) gen["eos_token_id"] = *id;
      if (auto id = (*tokenizer)->token_id(folder->bos_token()); id && !gen.contains("bos_token_id")) gen["bos_token_id"] = *id;
    }
  }
  std::ofstream out(fs::path(to) / "generation_config.json");
  out << gen.dump(2) << "\n";
  if (!out) return io_error("writing " + (fs::path(to) / "generation_config.json").string());
  return Status::ok();
}

}  // namespace cohort::hf
