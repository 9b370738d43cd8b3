// WorkingWeights: the registry behind Backend::set_working_weights. A
// working copy is a 16-bit (bf16 or f16) image of a range of fp32 master
// weights, in the same backend memory; the linear layers read it instead
// of rounding the masters on every call, and adamw_update rewrites the part
// it updates in the same pass. Lookups are by address: an op's weight
// pointer falls inside at most one registered master range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "models/tensor.h"

namespace cohort::models {

class WorkingWeights {
 public:
  struct Hit {
    void* working = nullptr;  // the copy of the looked-up pointer's first element
    DType dtype = DType::kBF16;
  };

  void add(const float* master, void* working, size_t n, DType dtype) {
    ranges_[master] = {working, n, dtype};
  }
  void remove(const float* master) { ranges_.erase(master); }
  bool empty() const { return ranges_.empty(); }

  // The working copy of [w, w + n) when a registered range holds all of it.
  Hit find(const float* w, size_t n) const {
    if (ranges_.empty()) return {};
    auto it = ranges_.upper_bound(w);
    if (it == ranges_.begin()) return {};
    --it;
    const float* master = it->first;
    const Range& r = it->second;
    if (w + n > master + r.n) return {};
    return {static_cast<char*>(r.working) + size_t(w - master) * dtype_size(r.dtype), r.dtype};
  }

 private:
  struct Range {
    void* working;
    size_t n;
    DType dtype;
  };
  std::map<const float*, Range> ranges_;
};

}  // namespace cohort::models
