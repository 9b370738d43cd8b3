// GlooStore: a cohort Store seen through gloo::rendezvous::Store, so that
// Gloo's full-mesh rendezvous exchanges its addresses through the job's
// store (the agent's, rank 0's, or a test's).
//
// Gloo's store interface reports failure by throwing; this adapter throws
// gloo::IoException with the store's message, and GlooCommunicator catches it
// at its boundary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "collective/store/store.h"

namespace cohort::collective {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<store::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<store::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace cohort::collective
