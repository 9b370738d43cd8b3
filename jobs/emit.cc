// to_toml: the resolved spec written back as a complete job file. The
// coordinator stores it and agents hand it to cohort-worker, so it must load
// back into the same spec (tests check the round trip).
#include <sstream>

#include <toml++/toml.h>

#include "jobs/load.h"

namespace cohort::jobs {

std::string to_toml(const JobSpec& spec) {
  toml::table job{
      {"name", spec.job.name},
      {"kind", to_string(spec.job.kind)},
      {"gpus_per_node", spec.job.gpus_per_node},
      {"max_restarts", spec.job.max_restarts},
      {"priority", spec.job.priority},
      {"output_dir", spec.job.output_dir},
      {"working_dir", spec.job.working_dir},
      {"devices", to_string(spec.job.devices)},
      {"stop_grace", spec.job.stop_grace_s},
      {"hang_timeout", spec.job.hang_timeout_s},
      {"placement_timeout", spec.job.placement_timeout_s},
  };
  if (!spec.job.port_range.empty()) job.insert("port_range", spec.job.port_range);
  if (spec.job.nodes.elastic())
    job.insert("nodes", std::to_string(spec.job.nodes.min) + ":" + std::to_string(spec.job.nodes.max));
  else
    job.insert("nodes", spec.job.nodes.min);
  toml::table env;
  for (const auto& [k, v] : spec.job.env) env.insert(k, v);
  job.insert("env", std::move(env));
  toml::table root{{"job", std::move(job)}};

  if (spec.job.kind != JobKind::kCommand) {
    toml::table model{{"max_seq", spec.model.max_seq}, {"attention", spec.model.attention}};
    if (!spec.model.preset.empty()) model.insert("preset", spec.model.preset);
    if (!spec.model.hf_dir.empty()) model.insert("hf_dir", spec.model.hf_dir);
    if (!spec.model.checkpoint.empty()) model.insert("checkpoint", spec.model.checkpoint);
    root.insert("model", std::move(model));
    root.insert("parallel", toml::table{
                                {"strategy", strategy_name(spec.parallel.strategy)},
                                {"tensor_parallel", spec.parallel.tensor_parallel},
                                {"bucket_mb", spec.parallel.bucket_mb},
                                {"reshard_after_forward", spec.parallel.reshard_after_forward},
                                {"prefetch", spec.parallel.prefetch},
                                {"param_dtype", spec.parallel.param_dtype},
                            });
  }
  if (spec.job.kind == JobKind::kTrain) {
    const auto& t = spec.train;
    toml::array data;
    for (const auto& d : t.data) {
      toml::table entry{{"path", d.path}, {"weight", d.weight}};
      if (!d.format.empty()) entry.insert("format", d.format);
      if (!d.text_field.empty()) entry.insert("text_field", d.text_field);
      data.push_back(std::move(entry));
    }
    root.insert("train", toml::table{
                             {"data", std::move(data)}, {"data_format", t.data_format}, {"text_field", t.text_field},
                             {"eval_fraction", t.eval_fraction}, {"steps", t.steps},
                             {"micro_batch", t.micro_batch}, {"global_batch", t.global_batch},
                             {"seq_len", t.seq_len}, {"lr", t.lr}, {"min_lr", t.min_lr},
                             {"warmup_steps", t.warmup_steps}, {"weight_decay", t.weight_decay},
                             {"beta1", t.beta1}, {"beta2", t.beta2}, {"grad_clip", t.grad_clip},
                             {"precision", to_string(t.precision)},
                             {"initial_loss_scale", t.initial_loss_scale},
                             {"loss_scale_window", t.loss_scale_window},
                             {"checkpoint_every", t.checkpoint_every},
                             {"checkpoint_storage", t.checkpoint_storage}, {"eval_every", t.eval_every},
                             {"eval_batches", t.eval_batches}, {"log_every", t.log_every},
                             {"seed", t.seed}, {"resume", t.resume},
                             {"sample_tokens", t.sample_tokens}, {"sample_prompt", t.sample_prompt},
                             {"tensorboard", t.tensorboard},
                         });
  }
  if (spec.job.kind == JobKind::kInfer) {
    const auto& i = spec.infer;
    toml::array stop;
    for (auto id : i.stop_tokens) stop.push_back(id);
    for (const auto& s : i.stop_strings) stop.push_back(s);
    root.insert("infer", toml::table{
                             {"prompts", i.prompts}, {"max_new_tokens", i.max_new_tokens},
                             {"temperature", i.temperature}, {"top_k", i.top_k}, {"top_p", i.top_p},
                             {"seed", i.seed}, {"stop", std::move(stop)},
                             {"batch_size", i.batch_size}, {"tensor_parallel", i.tensor_parallel},
                             {"cuda_graphs", i.cuda_graphs},
                         });
  }
  if (spec.job.kind == JobKind::kServe) {
    const auto& s = spec.serve;
    root.insert("serve", toml::table{
                             {"host", s.host}, {"port", s.port}, {"api_key", s.api_key},
                             {"model_name", s.model_name}, {"max_running", s.max_running},
                             {"max_queue", s.max_queue}, {"max_connections", s.max_connections},
                             {"max_body_bytes", s.max_body_bytes}, {"context", s.context},
                             {"prefill_chunk", s.prefill_chunk}, {"max_tokens", s.max_tokens},
                             {"temperature", s.temperature}, {"top_p", s.top_p}, {"top_k", s.top_k},
                             {"seed", s.seed}, {"tensor_parallel", s.tensor_parallel},
                             {"cuda_graphs", s.cuda_graphs},
                         });
  }
  if (spec.job.kind == JobKind::kCommand) {
    toml::array argv;
    for (const auto& a : spec.command.argv) argv.push_back(a);
    root.insert("command", toml::table{{"argv", std::move(argv)}});
  }
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

}  // namespace cohort::jobs
