// The model probe of validate, run and submit (see model_probe.h).
#include "cli/model_probe.h"

#include <filesystem>
#include <optional>


#include "hf/model_folder.h"
#include "hf/peft_config.h"
#include "models/config.h"

namespace cohort::cli {
namespace {

// The folder's own problems; the config when it opens.
std::optional<models::ModelConfig> probe_folder(const jobs::ModelSection& m, std::vector<ModelProblem>* problems) {
  auto fail = [&](const std::string& message) {
    problems->push_back({"model.hf_dir", "model.hf_dir: " + message});
    return std::nullopt;
  };
  std::error_code ec;
  if (!std::filesystem::is_directory(m.hf_dir, ec))
    return fail(m.hf_dir + " is not a folder (a Hugging Face model folder holds config.json, safetensors and the "
                           "tokenizer files)");
  auto folder = hf::ModelFolder::open(m.hf_dir);
  if (!folder) return fail(folder.status().message());
  if (!folder->has_model_config()) return fail(m.hf_dir + " has no config.json: it is not a Hugging Face model folder");
  auto config = folder->model_config(m.max_seq > 0 ? m.max_seq : 32768);
  if (!config) return fail(config.status().message());
  if (folder->has_tokenizer()) {
    auto tokenizer = folder->open_tokenizer();
    if (!tokenizer) return fail(tokenizer.status().message());
    if ((*tokenizer)->vocab_size() > config->vocab_size)
      fail("the tokenizer has " + std::to_string((*tokenizer)->vocab_size()) + " tokens, more than the model's "
           "vocab_size " + std::to_string(config->vocab_size) + " (config.json): ids past it have no embedding");
  }
  return *config;
}

// [model] adapter and [serve.adapters]: the folder's adapter_config.json
// reads and describes adapters cohort runs (its tensors' shapes are checked
// when the worker loads them: the control plane reads no safetensors).
void probe_adapter(const std::string& key, const std::string& dir, std::vector<ModelProblem>* problems) {
  auto peft = hf::read_peft_config(dir);
  if (!peft) problems->push_back({key, key + ": " + peft.status().message()});
}

}  // namespace

std::vector<ModelProblem> probe_model(const jobs::LoadResult& result, std::optional<models::ModelConfig>* probed) {
  std::vector<ModelProblem> problems;
  const jobs::JobSpec& spec = result.spec;
  if (spec.job.kind == jobs::JobKind::kCommand) return problems;
  const auto& m = spec.model;
  std::optional<models::ModelConfig> config;
  if (!m.preset.empty()) {
    if (auto preset = models::preset_config(m.preset)) config = *preset;
    if (config && m.max_seq > 0) config->max_seq = m.max_seq;
  }
  if (!m.hf_dir.empty()) config = probe_folder(m, &problems);
  if (!m.adapter.empty()) probe_adapter("model.adapter", m.adapter, &problems);
  if (spec.job.kind == jobs::JobKind::kServe)
    for (const auto& [name, dir] : spec.serve.adapters) probe_adapter("serve.adapters." + name, dir, &problems);
  if (config && spec.job.kind == jobs::JobKind::kTrain && spec.train.seq_len > config->max_seq)
    problems.push_back({"train.seq_len", "train.seq_len: " + std::to_string(spec.train.seq_len) +
                                             " is beyond the model's max_seq " + std::to_string(config->max_seq) +
                                             " (raise [model] max_seq, up to max_position_embeddings)"});
  // Expert parallelism splits the model's experts: it needs experts, as many
  // as a whole number per rank of the group.
  const int ep = spec.parallel.expert_parallel;
  if (config && spec.job.kind == jobs::JobKind::kTrain && ep > 1) {
    const std::string key = "parallel.expert_parallel";
    if (!config->is_moe()) {
      problems.push_back({key, key + ": " + std::to_string(ep) + " needs a mixture-of-experts model; " +
                                   config->model_type + " is dense"});
    } else if (config->moe.experts % ep != 0) {
      problems.push_back({key, key + ": " + std::to_string(ep) + " does not divide the model's " +
                                   std::to_string(config->moe.experts) + " experts"});
    }
  }
  if (probed) *probed = config;
  return problems;
}

}  // namespace cohort::cli
