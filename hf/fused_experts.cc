// Per-expert parameter names to their slices of transformers 5's fused
// expert tensors (fused_experts.h).
#include "hf/fused_experts.h"

#include <regex>

namespace cohort::hf {

std::optional<FusedSlice> fused_expert_slice(const models::ParamSpec& p, int experts) {
  static const std::regex kExpert(
      R"(^(model\.layers\.\d+\.)(mlp|block_sparse_moe)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$)");
  static const std::regex kMixtralRouter(R"(^(model\.layers\.\d+\.)block_sparse_moe\.gate\.weight$)");
  std::smatch m;
  if (p.shape.size() != 2) return std::nullopt;
  const int64_t rows = p.shape[0], cols = p.shape[1];
  if (std::regex_match(p.name, m, kMixtralRouter)) {
    return FusedSlice{m[1].str() + "mlp.gate.weight", p.global_shape, 0, rows, 0, cols};
  }
  if (!std::regex_match(p.name, m, kExpert)) return std::nullopt;
  const int64_t e = std::stoll(m[3].str());
  const std::string kind = m[4].str(), prefix = m[1].str() + "mlp.experts.";
  const int64_t begin = p.shard_begin;  // rows of gate/up, columns of down, on this rank
  if (kind == "down_proj" || kind == "w2") {
    const int64_t H = p.global_shape[0], I = p.global_shape[1];
    return FusedSlice{prefix + "down_proj", {experts, H, I}, e * H, (e + 1) * H, begin, begin + cols};
  }
  const int64_t I = p.global_shape[0], H = p.global_shape[1];
  const int64_t first = e * 2 * I + ((kind == "up_proj" || kind == "w3") ? I : 0) + begin;
  return FusedSlice{prefix + "gate_up_proj", {experts, 2 * I, H}, first, first + rows, 0, cols};
}

}  // namespace cohort::hf
