// Sharded checkpoints: saving each rank's shards, restoring them into any
// mesh or strategy, filling a model for inference, and exporting to Hugging
// Face format. The piece format is in checkpoint_format.h.
#include "parallel/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "base/atomic_file.h"
#include "collective/communicator.h"
#include "parallel/checkpoint_format.h"
#include "parallel/lora_checkpoint.h"
#include "hf/model_folder.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "hf/safetensors.h"
#include "parallel/parallelize.h"

namespace cohort::parallel {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "cohort-checkpoint/1";

Result<json> read_index(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "index.json");
  if (!in) return not_found("checkpoint " + dir + " has no index.json (an unfinished or foreign folder?)");
  try {
    json index = json::parse(in);
    if (index.value("format", "") != kFormat)
      return invalid_argument(dir + "/index.json: unknown format '" + index.value("format", "") + "'");
    return index;
  } catch (const json::exception& e) {
    return invalid_argument(dir + "/index.json: " + e.what());
  }
}

// This rank's shards of every group, appended to rank-<R>.bin.
Status write_rank_shards(const fs::path& dir, int rank, parallel::ParallelModel& pm) {
  std::string bin = fmt::format("rank-{}.bin", rank);
  std::ofstream out(dir / bin, std::ios::binary);
  std::vector<Piece> pieces;
  uint64_t offset = 0;
  const auto& layout = pm.trained().layout();
  std::vector<float> params, m, v;
  for (int g = 0; g < pm.trained().num_groups(); ++g) {
    COHORT_RETURN_IF_ERROR(pm.data_parallel->read_shard(g, &params, &m, &v));
    for (const auto& seg : pm.data_parallel->owned_segments(g)) {
      const auto& spec = layout.groups[g].params[seg.param];
      const std::vector<float>* tensors[3] = {&params, &m, &v};
      for (int t = 0; t < 3; ++t) {
        out.write(reinterpret_cast<const char*>(tensors[t]->data() + seg.shard_offset),
                  std::streamsize(seg.length * sizeof(float)));
        pieces.push_back(Piece{spec.name, PieceTensor(t), bin, offset, seg.length, seg.full_offset - spec.offset,
                               spec.shard_dim, spec.shard_begin, spec.shape});
        offset += seg.length * sizeof(float);
      }
    }
  }
  out.close();
  if (!out) return errno_error("writing " + (dir / bin).string());
  return write_piece_list((dir / fmt::format("rank-{}.json", rank)).string(), pieces);
}

// Node-local resume: the elements [first, first + length) of this rank's
// local slice of `spec` must be in the pieces this node holds.
Status check_segment_covered(const std::string& dir, const models::ParamSpec& spec, const std::vector<char>& covered,
                             size_t first, size_t length) {
  std::vector<float> mask(covered.begin(), covered.end()), local(spec.numel);
  slice_local(mask, spec, local.data());
  for (size_t i = first; i < first + length; ++i) {
    if (local[i] == 0.0f)
      return failed_precondition(dir + " does not hold this rank's shard of " + spec.name +
                                 " (node-local checkpoints resume only with the ranks on the nodes that wrote them)");
  }
  return Status::ok();
}

// A LoRA checkpoint's adapters as a PEFT folder, `adapter/` beside the
// shards. A node-local checkpoint whose other nodes hold some pieces has none
// (`cohort export` on a node that sees them all writes one).
Status write_adapter_folder(const fs::path& dir, const models::ModelConfig& config, const LoraCheckpoint& saved,
                            bool node_local) {
  COHORT_ASSIGN_OR_RETURN(PieceIndex pieces, read_piece_index(dir.string()));
  COHORT_ASSIGN_OR_RETURN(bool written, write_checkpoint_adapter(dir.string(), saved, pieces, config,
                                                                 (dir / "adapter").string(), node_local));
  if (!written) spdlog::info("checkpoint: no adapter/ folder here: other nodes hold some of the adapters' shards");
  return Status::ok();
}

Status barrier(collective::Communicator& world, const char* what) {
  Status s = world.barrier();
  return s.is_ok() ? s : s.with_context(std::string("checkpoint ") + what);
}

}  // namespace

std::string latest_checkpoint(const std::string& output_dir) {
  return latest_checkpoint_in((fs::path(output_dir) / "checkpoints").string());
}

std::string checkpoint_root(const std::string& output_dir, const CheckpointStorage& storage) {
  fs::path root = fs::path(output_dir) / "checkpoints";
  return (storage.node_local ? root / storage.node : root).string();
}

std::string latest_checkpoint_in(const std::string& root_dir) {
  fs::path root(root_dir);
  std::ifstream in(root / "latest");
  std::string name;
  if (!(in >> name)) return "";
  fs::path dir = root / name;
  return fs::exists(dir / "index.json") ? dir.string() : "";
}

std::string resolve_checkpoint_path(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::exists(p / "index.json", ec)) return path;
  if (fs::is_regular_file(p, ec) && p.filename() == "latest") {
    const std::string named = latest_checkpoint_in(p.parent_path().string());
    return named.empty() ? path : named;
  }
  for (const fs::path& root : {p, p / "checkpoints"}) {
    if (!fs::exists(root / "latest", ec)) continue;
    const std::string named = latest_checkpoint_in(root.string());
    if (!named.empty()) return named;
  }
  return path;
}

namespace {

// Step, data position, optimizer step count and loss-scaler state; an error
// names the index file and the field.
Result<TrainPosition> parse_position(const json& index, const std::string& dir) {
  const char* field = "step";
  try {
    TrainPosition position;
    position.step = index.at(field).get<int64_t>();
    field = "data_seed";
    position.data_seed = index.at(field).get<uint64_t>();
    field = "data_step";
    position.data_step = index.at(field).get<int64_t>();
    field = "optimizer_steps";
    position.optimizer_steps = index.value(field, position.step);
    field = "tokenizer_dir";
    position.tokenizer_dir = index.value(field, std::string());
    field = "loss_scaler";
    if (index.contains(field)) {
      const json& ls = index.at(field);
      position.loss_scaler = models::LossScalerState{ls.at("scale").get<double>(), ls.at("finite_steps").get<int64_t>()};
    }
    return position;
  } catch (const json::exception& e) {
    return invalid_argument(fmt::format("{}/index.json: field '{}': {}", dir, field, e.what()));
  }
}

}  // namespace

Result<models::ModelConfig> checkpoint_model_config(const std::string& checkpoint_dir) {
  COHORT_ASSIGN_OR_RETURN(json index, read_index(checkpoint_dir));
  auto config = hf::parse_config_json(index.at("config").dump(), 1 << 20);
  if (!config.is_ok()) return config.status().with_context(checkpoint_dir + "/index.json");
  return config;
}

Result<std::string> save_checkpoint(const std::string& output_dir, const models::ModelConfig& config,
                                    parallel::ParallelModel& pm, const TrainPosition& position,
                                    const std::string& strategy, collective::Communicator& world,
                                    const CheckpointStorage& storage) {
  fs::path root = checkpoint_root(output_dir, storage);
  std::string name = fmt::format("step-{}", position.step);
  fs::path tmp = root / (".tmp-" + name), final_dir = root / name;
  std::error_code ec;
  // The rank that creates the folder, writes the index and moves `latest`.
  const bool lead = storage.node_local ? storage.local_rank == 0 : world.rank() == 0;
  if (lead) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return io_error("cannot create " + tmp.string() + ": " + ec.message());
  }
  COHORT_RETURN_IF_ERROR(barrier(world, "start"));
  // DDP ranks hold identical copies: the first data-parallel replica writes
  // (node-local: each node's first one, its first tp ranks, so that every
  // node holds a whole copy). Under expert parallelism a replica is an
  // expert group: ep data-parallel ranks hold the experts between them.
  const ParallelDims& dims = pm.mesh->dims();
  bool first_replica = storage.node_local ? storage.local_rank < dims.tp * dims.ep
                                          : dims.expert_replica(world.rank()) == 0;
  bool writes = pm.data_parallel->strategy() != Strategy::kDdp || first_replica;
  Status written = writes ? write_rank_shards(tmp, world.rank(), pm) : Status::ok();
  COHORT_RETURN_IF_ERROR(written);
  COHORT_RETURN_IF_ERROR(barrier(world, "shards"));
  if (lead) {
    // Every parameter trained: under expert parallelism this rank's layout
    // holds only its own experts (LoRA's adapters are whole on every rank).
    json params = json::object();
    models::ParamLayout whole;
    const bool split_experts = dims.ep > 1 && !pm.lora;
    if (split_experts) {
      COHORT_ASSIGN_OR_RETURN(whole, models::make_param_layout(config, models::ShardSpec{}));
    }
    for (const auto& group : (split_experts ? whole : pm.trained().layout()).groups)
      for (const auto& p : group.params) params[p.name] = p.global_shape;
    json index = {{"format", kFormat},
                  {"step", position.step},
                  {"data_seed", position.data_seed},
                  {"data_step", position.data_step},
                  {"optimizer_steps", position.optimizer_steps},
                  {"strategy", strategy},
                  {"world", world.size()},
                  {"dp", pm.mesh->dims().dp},
                  {"tp", pm.mesh->dims().tp},
                  {"ep", pm.mesh->dims().ep},
                  {"config", json::parse(hf::config_json_text(config, models::DType::kF32))},
                  {"params", params}};
    if (!position.tokenizer_dir.empty()) index["tokenizer_dir"] = position.tokenizer_dir;
    if (storage.node_local) {
      index["storage"] = "node-local";
      index["node"] = storage.node;
      index["rank_nodes"] = storage.rank_nodes;
    }
    if (position.loss_scaler)
      index["loss_scaler"] = {{"scale", position.loss_scaler->scale},
                              {"finite_steps", position.loss_scaler->finite_steps}};
    if (pm.lora) index["lora"] = lora_index_entry(pm.lora->config(), position.lora_base);
    std::ofstream(tmp / "index.json") << index.dump(1) << "\n";
    if (pm.lora) COHORT_RETURN_IF_ERROR(write_adapter_folder(tmp, config, {pm.lora->config(), position.lora_base},
                                                             storage.node_local));
    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir, ec);
    if (ec) return io_error("renaming " + tmp.string() + ": " + ec.message());
    COHORT_RETURN_IF_ERROR(write_file_atomically((root / "latest").string(), name + "\n"));
  }
  COHORT_RETURN_IF_ERROR(barrier(world, "finish"));
  return final_dir.string();
}

Result<TrainPosition> restore_checkpoint(const std::string& dir, parallel::ParallelModel& pm, bool own_shards) {
  COHORT_ASSIGN_OR_RETURN(json index, read_index(dir));
  // The position first: a damaged index is refused before any shard is touched.
  COHORT_ASSIGN_OR_RETURN(TrainPosition position, parse_position(index, dir));
  COHORT_ASSIGN_OR_RETURN(std::optional<LoraCheckpoint> saved_lora, read_lora_entry(index, dir));
  COHORT_RETURN_IF_ERROR(check_resumable(dir, saved_lora, pm.lora ? &pm.lora->config() : nullptr));
  COHORT_ASSIGN_OR_RETURN(PieceIndex pieces, read_piece_index(dir));
  const auto& layout = pm.trained().layout();
  for (int g = 0; g < pm.trained().num_groups(); ++g) {
    const size_t n = pm.data_parallel->owned_numel(g);
    std::vector<float> owned[3] = {std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
    std::vector<float> local;
    // A parameter has at most one segment in a rank's shard, so each is
    // assembled once per tensor.
    for (const auto& seg : pm.data_parallel->owned_segments(g)) {
      const auto& spec = layout.groups[g].params[seg.param];
      for (int t = 0; t < 3; ++t) {
        std::vector<char> covered;
        COHORT_ASSIGN_OR_RETURN(auto global, assemble_global(dir, pieces, spec.name, PieceTensor(t), spec.global_shape,
                                                             own_shards ? &covered : nullptr));
        local.resize(spec.numel);
        slice_local(global, spec, local.data());
        const size_t first = seg.full_offset - spec.offset;
        if (own_shards) COHORT_RETURN_IF_ERROR(check_segment_covered(dir, spec, covered, first, seg.length));
        std::copy_n(local.data() + first, seg.length, owned[t].data() + seg.shard_offset);
      }
    }
    COHORT_RETURN_IF_ERROR(pm.data_parallel->write_shard(g, owned[0], owned[1], owned[2]));
  }
  spdlog::info("resumed from {} (step {}, saved by {} at world {} = dp {} × tp {})", dir, position.step,
               index.value("strategy", "?"), index.value("world", 0), index.value("dp", 0), index.value("tp", 0));
  return position;
}

Status load_checkpoint_params(const std::string& dir, models::Model& model) {
  COHORT_ASSIGN_OR_RETURN(json index, read_index(dir));
  COHORT_ASSIGN_OR_RETURN(std::optional<LoraCheckpoint> lora, read_lora_entry(index, dir));
  COHORT_ASSIGN_OR_RETURN(PieceIndex pieces, read_piece_index(dir));
  if (lora) return load_merged_lora(dir, *lora, pieces, model);
  std::vector<float> local;
  for (int g = 0; g < model.num_groups(); ++g) {
    for (const auto& spec : model.layout().groups[g].params) {
      COHORT_ASSIGN_OR_RETURN(auto global, assemble_global(dir, pieces, spec.name, PieceTensor::kParam, spec.global_shape));
      local.resize(spec.numel);
      slice_local(global, spec, local.data());
      model.backend().copy_from_host(model.params(g) + spec.offset, local.data(), spec.numel * sizeof(float));
    }
    model.group_filled(g);
  }
  return Status::ok();
}

namespace {

// The PEFT adapter folder, or (merge) the base with the adapters merged in,
// built whole on the CPU, with the run's tokenizer files.
Status export_lora(const std::string& dir, const std::string& hf_dir, const json& index,
                   const models::ModelConfig& config, const LoraCheckpoint& lora, models::DType dtype, bool merge) {
  COHORT_ASSIGN_OR_RETURN(PieceIndex pieces, read_piece_index(dir));
  if (!merge) return status_of(write_checkpoint_adapter(dir, lora, pieces, config, hf_dir));
  auto backend = models::make_cpu_backend();
  COHORT_ASSIGN_OR_RETURN(auto model, models::Model::create(config, {}, backend.get(), {},
                                                            models::Model::Buffers::kParamsOnly));
  COHORT_RETURN_IF_ERROR(load_merged_lora(dir, lora, pieces, *model));
  std::error_code ec;
  fs::create_directories(hf_dir, ec);
  if (ec) return io_error("cannot create " + hf_dir + ": " + ec.message());
  COHORT_RETURN_IF_ERROR(hf::save_model_folder(*model, hf_dir, dtype));
  return hf::export_side_files(index.value("tokenizer_dir", std::string()), hf_dir, index.at("config"));
}

}  // namespace

std::string checkpoint_tokenizer_dir(const std::string& dir) {
  auto index = read_index(dir);
  if (!index) return "";
  return index->value("tokenizer_dir", std::string());
}

bool is_lora_checkpoint(const std::string& dir) {
  auto index = read_index(dir);
  return index.is_ok() && index->contains("lora");
}

Status export_checkpoint(const std::string& dir, const std::string& hf_dir, models::DType dtype, bool merge) {
  if (dtype != models::DType::kF32 && dtype != models::DType::kBF16)
    return invalid_argument("export: --dtype must be fp32 or bf16");
  COHORT_ASSIGN_OR_RETURN(json index, read_index(dir));
  COHORT_ASSIGN_OR_RETURN(models::ModelConfig config, checkpoint_model_config(dir));
  COHORT_ASSIGN_OR_RETURN(std::optional<LoraCheckpoint> lora, read_lora_entry(index, dir));
  if (merge && !lora)
    return invalid_argument("export --merge: " + dir + " is a full-model checkpoint (merging is for LoRA "
                            "adapters); export it without --merge");
  if (lora) return export_lora(dir, hf_dir, index, config, *lora, dtype, merge);
  COHORT_ASSIGN_OR_RETURN(PieceIndex pieces, read_piece_index(dir));
  std::vector<std::vector<float>> storage;
  std::vector<hf::TensorToWrite> tensors;
  storage.reserve(index.at("params").size());
  for (const auto& [name, shape_json] : index.at("params").items()) {
    auto shape = shape_json.get<std::vector<int64_t>>();
    COHORT_ASSIGN_OR_RETURN(auto global, assemble_global(dir, pieces, name, PieceTensor::kParam, shape));
    storage.push_back(std::move(global));
    tensors.push_back(hf::TensorToWrite{name, shape, storage.back().data(), dtype});
  }
  std::error_code ec;
  fs::create_directories(hf_dir, ec);
  if (ec) return io_error("cannot create " + hf_dir + ": " + ec.message());
  COHORT_RETURN_IF_ERROR(hf::write_safetensors_folder(hf_dir, tensors));
  COHORT_RETURN_IF_ERROR(hf::write_config_json(hf_dir, config, dtype));
  return hf::export_side_files(index.value("tokenizer_dir", std::string()), hf_dir, index.at("config"));
}

}  // namespace cohort::parallel
