// The names a server's LoRA adapters answer to in a request's `model`: set
// at start from [serve.adapters] and changed at run time by the load and
// unload endpoints (serve_http.h), read by the prompt threads as requests
// arrive. Each name stands for an engine adapter index, which is never
// reused. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cohort::infer {

class AdapterNames {
 public:
  std::optional<int> find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_name_.find(name);
    return it == by_name_.end() ? std::nullopt : std::optional<int>(it->second);
  }
  // In index order (the order they were loaded).
  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& [index, name] : by_index_) out.push_back(name);
    return out;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return by_name_.size();
  }
  bool serves(int index) const {
    std::lock_guard<std::mutex> lock(mu_);
    return by_index_.count(index) > 0;
  }
  void add(const std::string& name, int index) {
    std::lock_guard<std::mutex> lock(mu_);
    by_name_[name] = index;
    by_index_[index] = name;
  }
  void remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return;
    by_index_.erase(it->second);
    by_name_.erase(it);
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> by_name_;  // GUARDED_BY(mu_)
  std::map<int, std::string> by_index_;  // GUARDED_BY(mu_)
};

}  // namespace cohort::infer
