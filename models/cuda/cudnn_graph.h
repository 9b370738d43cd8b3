// cuDNN's graph API (the backend descriptors), loaded at run time.
//
// cohort does not link cuDNN: libcudnn.so.9 is opened on first use
// (COHORT_CUDNN_LIBRARY names another file), so a worker built with the
// headers still runs where the library is missing, and then takes its own
// kernels. Only the handful of backend entry points the fused attention
// needs are looked up.
//
// A Graph collects tensors and operations, then `plan()` asks cuDNN's
// heuristics for engine configurations and keeps the first one that
// finalizes. Every failure comes back as a Status carrying cuDNN's own last
// error text, which names the attribute or node it rejected.
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::models::cuda::cudnn {

// The entry points, resolved once per process.
struct Api {
  decltype(&::cudnnGetVersion) get_version;
  decltype(&::cudnnGetErrorString) error_string;
  decltype(&::cudnnGetLastErrorString) last_error;
  decltype(&::cudnnCreate) create;
  decltype(&::cudnnDestroy) destroy;
  decltype(&::cudnnSetStream) set_stream;
  decltype(&::cudnnBackendCreateDescriptor) create_descriptor;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_descriptor;
  decltype(&::cudnnBackendSetAttribute) set_attribute;
  decltype(&::cudnnBackendGetAttribute) get_attribute;
  decltype(&::cudnnBackendFinalize) finalize;
  decltype(&::cudnnBackendExecute) execute;
};

// The loaded library, or why there is none (not found, too old, a missing
// symbol). Loaded once; later calls return the same answer.
Result<const Api*> api();

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptor_t d) : d_(d) {}
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A 4-d tensor as cuDNN's attention graphs use them: [batch, heads, rows,
// columns] with arbitrary strides, in elements.
using Dims = std::array<int64_t, 4>;

struct TensorRef {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  Dims dims{}, strides{};
  cudnnBackendDescriptor_t desc = nullptr;
};

// Strides of a dense row-major tensor of these dimensions.
Dims packed_strides(const Dims& dims);

class Graph {
 public:
  explicit Graph(cudnnHandle_t handle) : handle_(handle) {}

  // A tensor that the caller binds to memory at execution (uid < 100).
  Result<TensorRef> io(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides);
  // A host scalar passed by value at execution.
  Result<TensorRef> scalar(int64_t uid, cudnnDataType_t type);
  // An intermediate that lives only inside the fused kernels.
  Result<TensorRef> virtual_tensor(cudnnDataType_t type, Dims dims, Dims strides);
  Result<TensorRef> virtual_tensor(cudnnDataType_t type, Dims dims) {
    return virtual_tensor(type, dims, packed_strides(dims));
  }

  // y = mode(x [, b [, t]]), computed in `compute` (index generation takes
  // `axis`).
  Status pointwise(cudnnPointwiseMode_t mode, const TensorRef& y, const TensorRef& x,
                   const TensorRef* b = nullptr, const TensorRef* t = nullptr,
                   cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  Status matmul(const TensorRef& c, const TensorRef& a, const TensorRef& b);
  // Reduces x onto y's shape (the dimensions where y has 1).
  Status reduction(cudnnReduceTensorOp_t op, const TensorRef& y, const TensorRef& x);
  // The same elements under new dimensions and strides.
  Status reshape(const TensorRef& y, const TensorRef& x);

  // Finalizes the operation graph and returns an execution plan from the
  // heuristics' list (the first that cuDNN accepts), with its workspace.
  // The plan keeps every descriptor it was made from alive, as cuDNN's own
  // frontend does (the plan refers to its engine configuration, and that to
  // the operation graph).
  struct Plan {
    std::vector<Descriptor> sources;  // first, so destroyed after the plan
    Descriptor plan;
    int64_t workspace = 0;
    std::string engine;  // for logs: the engine's global index
  };
  // Consumes the graph: its descriptors move into the plan.
  Result<Plan> plan();

 private:
  Status add_operation(Descriptor op);
  cudnnHandle_t handle_;
  int64_t next_virtual_uid_ = 1000;
  std::vector<Descriptor> tensors_, descriptors_, operations_;
};

// Runs a plan with these (uid, pointer) bindings and a workspace.
Status execute(cudnnHandle_t handle, const Graph::Plan& plan, const std::vector<int64_t>& uids,
               const std::vector<void*>& pointers, void* workspace);

// "what: cuDNN's status name: cuDNN's last error text".
Status error(const char* what, cudnnStatus_t status);

}  // namespace cohort::models::cuda::cudnn
