// A GenerationQueue that takes requests and never answers them: for tests
// of the HTTP front that need no model behind it.
#pragma once

#include <cstdint>

#include "infer/serve/serve_http.h"

namespace cohort::testing {

class IdleQueue final : public infer::GenerationQueue {
 public:
  void submit(infer::SequenceRequest) override {}
  void cancel(int64_t) override {}
  infer::LoopGauges gauges() const override { return {}; }
};

}  // namespace cohort::testing
