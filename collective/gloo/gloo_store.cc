// GlooStore: forwards to the cohort Store, turning errors into the
// exceptions Gloo expects.
#include "collective/gloo/gloo_store.h"

#include <gloo/common/error.h>

namespace cohort::collective {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status s = store_->set(key, std::string(data.begin(), data.end()));
  if (!s.is_ok()) throw ::gloo::IoException(s.to_string());
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto value = store_->get(key, timeout_);
  if (!value.is_ok()) throw ::gloo::IoException(value.status().to_string());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Status s = store_->wait(keys, timeout);
  if (!s.is_ok()) throw ::gloo::IoException(s.to_string());
}

}  // namespace cohort::collective
