#include "models/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include "base/dynamic_library.h"
#include "base/env_knobs.h"

// The graph's and plan's handle attributes are marked deprecated in favour
// of device properties; they still work and keep the plan tied to the
// handle's device, which is what a worker (one device) wants.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace cohort::models::cuda::cudnn {
namespace {

// The fused attention graphs need the 9.x graph API.
constexpr size_t kMinVersion = 90000;

Result<const Api*> load() {
  const char* named = read_env_knob(EnvKnob::kCudnnLibrary);
  // Kept open for the process: plans and handles live until exit.
  static DynamicLibrary lib;
  COHORT_ASSIGN_OR_RETURN(lib, DynamicLibrary::open(named ? named : "libcudnn.so.9"));
  static Api table;
  COHORT_RETURN_IF_ERROR(lib.require("cudnnGetVersion", &table.get_version));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnGetErrorString", &table.error_string));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnGetLastErrorString", &table.last_error));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnCreate", &table.create));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnDestroy", &table.destroy));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnSetStream", &table.set_stream));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendCreateDescriptor", &table.create_descriptor));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendDestroyDescriptor", &table.destroy_descriptor));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendSetAttribute", &table.set_attribute));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendGetAttribute", &table.get_attribute));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendFinalize", &table.finalize));
  COHORT_RETURN_IF_ERROR(lib.require("cudnnBackendExecute", &table.execute));
  const size_t version = table.get_version();
  if (version < kMinVersion) {
    return unavailable(fmt::format("{} is cuDNN {}, older than 9.0", lib.file(), version));
  }
  return &table;
}

const Api& A() { return **api(); }  // only after api() succeeded

Result<Descriptor> make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  const cudnnStatus_t s = A().create_descriptor(type, &d);
  if (s != CUDNN_STATUS_SUCCESS) return error("cudnnBackendCreateDescriptor", s);
  return Descriptor(d);
}

Status set(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value, const char* what) {
  const cudnnStatus_t s = A().set_attribute(d.get(), name, type, count, value);
  return s == CUDNN_STATUS_SUCCESS ? Status::ok() : error(what, s);
}
Status set_desc(const Descriptor& d, cudnnBackendAttributeName_t name,
                cudnnBackendDescriptor_t value, const char* what) {
  return set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}
Status finalize(const Descriptor& d, const char* what) {
  const cudnnStatus_t s = A().finalize(d.get());
  return s == CUDNN_STATUS_SUCCESS ? Status::ok() : error(what, s);
}

}  // namespace

Result<const Api*> api() {
  static const Result<const Api*> loaded = load();  // once, thread-safe
  return loaded;
}

Status error(const char* what, cudnnStatus_t status) {
  char detail[1024] = {0};
  A().last_error(detail, sizeof(detail));
  return internal_error(fmt::format("{}: {}{}{}", what, A().error_string(status),
                                    detail[0] ? ": " : "", detail));
}

Descriptor::~Descriptor() {
  if (d_) A().destroy_descriptor(d_);
}
Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_) A().destroy_descriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Dims packed_strides(const Dims& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

namespace {
Result<Descriptor> tensor_descriptor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                     const Dims& strides, bool is_virtual, bool by_value) {
  COHORT_ASSIGN_OR_RETURN(Descriptor d, make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const int64_t alignment = 16;
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid"));
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type"));
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dims"));
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides"));
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment"));
  COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual"));
  if (by_value) {
    COHORT_RETURN_IF_ERROR(set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value"));
  }
  COHORT_RETURN_IF_ERROR(finalize(d, fmt::format("tensor {}", uid).c_str()));
  return d;
}
}  // namespace

Result<TensorRef> Graph::io(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides) {
  COHORT_ASSIGN_OR_RETURN(Descriptor d, tensor_descriptor(uid, type, dims, strides, false, false));
  TensorRef t{uid, type, dims, strides, d.get()};
  tensors_.push_back(std::move(d));
  return t;
}

Result<TensorRef> Graph::scalar(int64_t uid, cudnnDataType_t type) {
  const Dims one{1, 1, 1, 1};
  COHORT_ASSIGN_OR_RETURN(Descriptor d, tensor_descriptor(uid, type, one, one, false, true));
  TensorRef t{uid, type, one, one, d.get()};
  tensors_.push_back(std::move(d));
  return t;
}

Result<TensorRef> Graph::virtual_tensor(cudnnDataType_t type, Dims dims, Dims strides) {
  const int64_t uid = next_virtual_uid_++;
  COHORT_ASSIGN_OR_RETURN(Descriptor d, tensor_descriptor(uid, type, dims, strides, true, false));
  TensorRef t{uid, type, dims, strides, d.get()};
  tensors_.push_back(std::move(d));
  return t;
}

Status Graph::add_operation(Descriptor op) {
  COHORT_RETURN_IF_ERROR(finalize(op, "operation"));
  operations_.push_back(std::move(op));
  return Status::ok();
}

Status Graph::pointwise(cudnnPointwiseMode_t mode, const TensorRef& y, const TensorRef& x,
                        const TensorRef* b, const TensorRef* t, cudnnDataType_t compute,
                        int64_t axis) {
  COHORT_ASSIGN_OR_RETURN(Descriptor pw, make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode"));
  COHORT_RETURN_IF_ERROR(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "pointwise precision"));
  if (axis >= 0) {
    COHORT_RETURN_IF_ERROR(set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis"));
  }
  COHORT_RETURN_IF_ERROR(finalize(pw, "pointwise descriptor"));
  COHORT_ASSIGN_OR_RETURN(Descriptor op, make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get(), "pointwise op"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc, "pointwise x"));
  if (b) COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->desc, "pointwise b"));
  if (t) COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->desc, "pointwise t"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc, "pointwise y"));
  descriptors_.push_back(std::move(pw));
  return add_operation(std::move(op));
}

Status Graph::matmul(const TensorRef& c, const TensorRef& a, const TensorRef& b) {
  COHORT_ASSIGN_OR_RETURN(Descriptor mm, make(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  COHORT_RETURN_IF_ERROR(set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "matmul precision"));
  COHORT_RETURN_IF_ERROR(finalize(mm, "matmul descriptor"));
  COHORT_ASSIGN_OR_RETURN(Descriptor op, make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc, "matmul a"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc, "matmul b"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc, "matmul c"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get(), "matmul op"));
  descriptors_.push_back(std::move(mm));
  return add_operation(std::move(op));
}

Status Graph::reduction(cudnnReduceTensorOp_t reduce, const TensorRef& y, const TensorRef& x) {
  COHORT_ASSIGN_OR_RETURN(Descriptor red, make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  COHORT_RETURN_IF_ERROR(set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, "reduction operator"));
  COHORT_RETURN_IF_ERROR(set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "reduction precision"));
  COHORT_RETURN_IF_ERROR(finalize(red, "reduction descriptor"));
  COHORT_ASSIGN_OR_RETURN(Descriptor op, make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc, "reduction x"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc, "reduction y"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red.get(), "reduction op"));
  descriptors_.push_back(std::move(red));
  return add_operation(std::move(op));
}

Status Graph::reshape(const TensorRef& y, const TensorRef& x) {
  COHORT_ASSIGN_OR_RETURN(Descriptor op, make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc, "reshape x"));
  COHORT_RETURN_IF_ERROR(set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc, "reshape y"));
  return add_operation(std::move(op));
}

Result<Graph::Plan> Graph::plan() {
  COHORT_ASSIGN_OR_RETURN(Descriptor graph, make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : operations_) ops.push_back(op.get());
  COHORT_RETURN_IF_ERROR(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "graph handle"));
  COHORT_RETURN_IF_ERROR(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             int64_t(ops.size()), ops.data(), "graph operations"));
  COHORT_RETURN_IF_ERROR(finalize(graph, "operation graph"));

  COHORT_ASSIGN_OR_RETURN(Descriptor heur, make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  COHORT_RETURN_IF_ERROR(set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get(), "heuristics graph"));
  COHORT_RETURN_IF_ERROR(set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode"));
  COHORT_RETURN_IF_ERROR(finalize(heur, "heuristics"));
  int64_t count = 0;
  cudnnStatus_t s = A().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (s != CUDNN_STATUS_SUCCESS) return error("heuristics result count", s);
  if (count == 0) return unavailable("cuDNN's heuristics offer no engine for this graph");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    COHORT_ASSIGN_OR_RETURN(Descriptor c, make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(c.get());
    configs.push_back(std::move(c));
  }
  int64_t got = 0;
  s = A().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                        count, &got, raw.data());
  if (s != CUDNN_STATUS_SUCCESS) return error("heuristics results", s);

  Status last = unavailable("no engine configuration finalized");
  for (int64_t i = 0; i < got; ++i) {
    COHORT_ASSIGN_OR_RETURN(Descriptor plan, make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
    COHORT_RETURN_IF_ERROR(set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "plan handle"));
    COHORT_RETURN_IF_ERROR(set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[i], "plan config"));
    last = finalize(plan, "execution plan");
    if (!last.is_ok()) continue;
    Plan p;
    s = A().get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                          &count, &p.workspace);
    if (s != CUDNN_STATUS_SUCCESS) return error("plan workspace size", s);
    // The engine's global index names it in cuDNN's logs.
    {
      COHORT_ASSIGN_OR_RETURN(Descriptor e, make(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
      cudnnBackendDescriptor_t raw_engine = e.get();
      int64_t n = 0;
      if (A().get_attribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                            &raw_engine) == CUDNN_STATUS_SUCCESS) {
        int64_t index = -1;
        A().get_attribute(raw_engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
        p.engine = fmt::format("engine {} (config {} of {})", index, i + 1, got);
      }
    }
    p.plan = std::move(plan);
    for (auto* list : {&tensors_, &descriptors_, &operations_, &configs}) {
      for (Descriptor& d : *list) p.sources.push_back(std::move(d));
      list->clear();
    }
    p.sources.push_back(std::move(heur));
    p.sources.push_back(std::move(graph));
    return p;
  }
  return last.with_context(fmt::format("none of {} engine configurations", got));
}

Status execute(cudnnHandle_t handle, const Graph::Plan& plan, const std::vector<int64_t>& uids,
               const std::vector<void*>& pointers, void* workspace) {
  COHORT_ASSIGN_OR_RETURN(Descriptor pack, make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  COHORT_RETURN_IF_ERROR(set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                             int64_t(uids.size()), uids.data(), "variant pack uids"));
  COHORT_RETURN_IF_ERROR(set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                             int64_t(pointers.size()), pointers.data(), "variant pack pointers"));
  COHORT_RETURN_IF_ERROR(set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                             &workspace, "variant pack workspace"));
  COHORT_RETURN_IF_ERROR(finalize(pack, "variant pack"));
  const cudnnStatus_t s = A().execute(handle, plan.plan.get(), pack.get());
  return s == CUDNN_STATUS_SUCCESS ? Status::ok() : error("cudnnBackendExecute", s);
}

}  // namespace cohort::models::cuda::cudnn
