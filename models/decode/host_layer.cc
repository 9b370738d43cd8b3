// A decoder layer's weights on the host, as the graph engine uploads them
// (host_layer.h).
#include "models/decode/host_layer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/half_float.h"
#include "base/parallel_for.h"

namespace cohort::models::decode {
namespace {

using Part = std::pair<const float*, size_t>;  // values, count

// The parts one after the other in bf16 (round to nearest even), in pieces
// of at most 1M elements over the machine's cores, all parts' pieces in one
// pass: a layer of 128 experts is 256 parts of 1.5M to 3M elements each,
// which one pass a part would spread over only two or three cores.
std::vector<Bf16Bits> bf16_of(const std::vector<Part>& parts) {
  constexpr size_t kPiece = size_t{1} << 20;
  struct Piece {
    const float* from;
    size_t at, count;
  };
  std::vector<Piece> pieces;
  size_t total = 0;
  for (const Part& p : parts) {
    for (size_t begin = 0; begin < p.second; begin += kPiece) {
      pieces.push_back({p.first + begin, total + begin, std::min(kPiece, p.second - begin)});
    }
    total += p.second;
  }
  std::vector<Bf16Bits> out(total);
  parallel_for(pieces.size(), [&](size_t i) {
    const Piece& piece = pieces[i];
    Bf16Bits* dst = out.data() + piece.at;
    for (size_t j = 0; j < piece.count; ++j) dst[j] = float_to_bf16_bits(piece.from[j]);
  });
  return out;
}

std::vector<float> copy_of(const float* values, size_t count) {
  return values ? std::vector<float>(values, values + count) : std::vector<float>();
}

// One fused projection in the row layout from its parts (HF weights of the
// layer, stacked by rows): the folder's own packed weights when it gives
// every part, else the values quantized to projection_format, else nullopt
// (bf16).
Result<std::optional<quant::RowPackedWeight>> pack_fused(const Model& model, int layer,
                                                         const std::vector<const char*>& names,
                                                         const HostLayerFormats& formats) {
  if (!formats.packed_projection && !formats.projection_format) return std::optional<quant::RowPackedWeight>();
  const int g = model.layout().block_group(layer);
  const ParamGroup& group = model.layout().groups[g];
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  std::vector<const ParamSpec*> specs;
  for (const char* name : names) {
    const ParamSpec* spec = group.find(prefix + name);
    if (!spec) return internal_error(prefix + name + " is not in the layout");
    specs.push_back(spec);
  }
  std::vector<quant::RowPackedWeight> parts;
  if (formats.packed_projection) {
    for (const ParamSpec* spec : specs) {
      COHORT_ASSIGN_OR_RETURN(auto part, formats.packed_projection(*spec));
      if (!part) break;
      parts.push_back(std::move(*part));
    }
    if (parts.size() == specs.size()) {
      auto stacked = quant::stack_rows(parts);
      if (stacked.is_ok()) return std::optional<quant::RowPackedWeight>(std::move(*stacked));
    }
    parts.clear();
  }
  if (!formats.projection_format) return std::optional<quant::RowPackedWeight>();
  const float* values = model.params(g);
  parts.resize(specs.size());
  std::vector<Status> results(specs.size(), Status::ok());
  parallel_for(specs.size(), [&](size_t i) {
    const ParamSpec& spec = *specs[i];
    auto q = quant::quantize(*formats.projection_format, spec.name, values + spec.offset, spec.shape[0],
                             spec.shape[1]);
    if (!q.is_ok()) return void(results[i] = q.status());
    auto packed = quant::pack_rows(*q);
    if (!packed.is_ok()) return void(results[i] = packed.status());
    parts[i] = std::move(*packed);
  });
  for (const Status& s : results) COHORT_RETURN_IF_ERROR(s);
  COHORT_ASSIGN_OR_RETURN(auto stacked, quant::stack_rows(parts));
  return std::optional<quant::RowPackedWeight>(std::move(stacked));
}

}  // namespace

Result<HostLayer> make_host_layer(const Model& model, int layer, const HostLayerFormats& formats) {
  const ModelConfig& config = model.config();
  const LocalDims& dims = model.dims();
  const ParamLayout& layout = model.layout();
  const size_t H = config.hidden, D = config.head_dim, Qd = dims.q_dim(), KVd = dims.kv_dim();
  const size_t I = dims.intermediate;
  const BlockTensors w = layout.block_tensors(layer, model.params(layout.block_group(layer)));
  HostLayer out;
  out.sparse = config.is_moe_layer(layer);
  static const std::vector<const char*> kNames[4] = {
      {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
      {"self_attn.o_proj.weight"},
      {"mlp.gate_proj.weight", "mlp.up_proj.weight"},
      {"mlp.down_proj.weight"}};
  const std::vector<Part> parts[4] = {{{w.q, Qd * H}, {w.k, KVd * H}, {w.v, KVd * H}},
                                      {{w.o, H * Qd}},
                                      {{w.gate, I * H}, {w.up, I * H}},
                                      {{w.down, H * I}}};
  for (int i = 0; i < 4; ++i) {
    if (out.sparse && i >= HostLayer::kGateUp) continue;  // the experts below instead
    COHORT_ASSIGN_OR_RETURN(out.packed[i], pack_fused(model, layer, kNames[i], formats));
    if (!out.packed[i]) out.bf16[i] = bf16_of(parts[i]);
  }
  if (out.sparse) {
    // Expert e's gate, up and down follow each other in the block.
    const size_t E = dims.experts, Ie = dims.expert_intermediate, stride = layout.expert_stride;
    std::vector<Part> gate_up, down;
    for (size_t e = 0; e < E; ++e) {
      gate_up.push_back({w.experts + e * stride, 2 * Ie * H});
      down.push_back({w.experts + e * stride + 2 * Ie * H, Ie * H});
    }
    out.router = bf16_of({{w.router, E * H}});
    out.experts_gu = bf16_of(gate_up);
    out.experts_down = bf16_of(down);
  }
  out.attn_norm = copy_of(w.attn_norm, H);
  out.mlp_norm = copy_of(w.mlp_norm, H);
  if (config.qk_norm) {
    out.q_norm = copy_of(w.q_norm, D);
    out.k_norm = copy_of(w.k_norm, D);
  }
  if (config.attention_bias) {
    out.qkv_bias = copy_of(w.q_bias, Qd);
    const std::vector<float> k = copy_of(w.k_bias, KVd), v = copy_of(w.v_bias, KVd);
    out.qkv_bias.insert(out.qkv_bias.end(), k.begin(), k.end());
    out.qkv_bias.insert(out.qkv_bias.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace cohort::models::decode
