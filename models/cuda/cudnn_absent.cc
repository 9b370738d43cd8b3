// CudnnAttention where cohort was built without cuDNN's headers: never
// available, so "auto" takes the flash kernels and "cudnn" is refused with
// this reason.
#include "models/cuda/cudnn_attention.h"

namespace cohort::models::cuda {
namespace {
Status absent() {
  return unavailable("this build has no cuDNN support (cudnn_graph.h was not found at configure time)");
}
}  // namespace

Status cudnn_attention_available() { return absent(); }

struct CudnnAttention::Plans {};

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::create() { return absent(); }
CudnnAttention::CudnnAttention(void* handle) : handle_(handle) {}
CudnnAttention::~CudnnAttention() = default;
const CudnnAttention::Plans* CudnnAttention::find(const CudnnAttentionShape&) const { return nullptr; }
Status CudnnAttention::prepare(const CudnnAttentionShape&) { return absent(); }
size_t CudnnAttention::workspace_bytes(const CudnnAttentionShape&) const { return 0; }
Status CudnnAttention::forward(cudaStream_t, const CudnnAttentionShape&, void*, float*, const void*,
                               const void*, const void*, void*) {
  return absent();
}
Status CudnnAttention::backward(cudaStream_t, const CudnnAttentionShape&, void*, void*, void*,
                                const void*, const void*, const void*, const void*, const void*,
                                const float*, void*) {
  return absent();
}
std::string CudnnAttention::describe() const { return "no cuDNN"; }

}  // namespace cohort::models::cuda
