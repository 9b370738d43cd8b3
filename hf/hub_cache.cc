// Model ids in the local Hugging Face cache (see hub_cache.h).
#include "hf/hub_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;

bool id_part(const std::string& s) {
  if (s.empty() || s.size() > 96 || s[0] == '.') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

bool looks_like_hub_id(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  return id_part(text.substr(0, slash)) && id_part(text.substr(slash + 1));
}

std::string hub_cache_dir() {
  if (const char* cache = std::getenv("HF_HUB_CACHE"); cache && *cache) return cache;
  if (const char* home = std::getenv("HF_HOME"); home && *home) return (fs::path(home) / "hub").string();
  const char* user_home = std::getenv("HOME");
  return (fs::path(user_home && *user_home ? user_home : "/root") / ".cache" / "huggingface" / "hub").string();
}

Result<std::string> find_in_hub_cache(const std::string& id) {
  if (!looks_like_hub_id(id)) return invalid_argument("'" + id + "' is not a Hugging Face model id (ORG/NAME)");
  const fs::path repo = fs::path(hub_cache_dir()) / ("models--" + id.substr(0, id.find('/')) + "--" +
                                                     id.substr(id.find('/') + 1));
  const fs::path snapshots = repo / "snapshots";
  std::error_code ec;
  std::string revision;
  if (std::ifstream ref(repo / "refs" / "main"); ref) ref >> revision;
  if (!revision.empty() && fs::is_directory(snapshots / revision, ec)) return (snapshots / revision).string();
  std::string only;
  int count = 0;
  if (fs::is_directory(snapshots, ec))
    for (const auto& entry : fs::directory_iterator(snapshots, ec))
      if (entry.is_directory(ec)) only = entry.path().string(), ++count;
  if (count == 1) return only;
  if (count > 1)
    return not_found("'" + id + "' has " + std::to_string(count) + " snapshots in " + snapshots.string() +
                     " and refs/main names none of them: give the snapshot folder as hf_dir");
  return not_found("'" + id + "' is not a folder, and the Hugging Face cache has no snapshot of it (looked in " +
                   repo.string() + "; set HF_HUB_CACHE or HF_HOME to another cache). cohort never downloads: "
                   "fetch it first, e.g. `huggingface-cli download " + id + "`");
}

}  // namespace cohort::hf
