// Sources to samplers, through the tokenized cache for text.
#include "hf/model_folder.h"
#include "train/training_data.h"

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "data/data_format.h"
#include "data/token_source.h"
#include "data/tokenize.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return (h ^ 0xff) * 0x100000001b3ull;
}

// Identity of a file or folder's contents as far as the cache cares: path, size, mtime.
uint64_t stamp(uint64_t h, const std::string& path) {
  std::error_code ec;
  auto one = [&](const fs::path& p) {
    h = fnv(h, p.string());
    h = fnv(h, std::to_string(fs::is_regular_file(p, ec) ? fs::file_size(p, ec) : 0));
    h = fnv(h, std::to_string(fs::last_write_time(p, ec).time_since_epoch().count()));
  };
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) one(f);
  } else {
    one(path);
  }
  return h;
}

std::string cache_dir(const jobs::JobSpec& spec, const jobs::DataSource& src, data::DataFormat format,
                      const std::string& text_field, const TrainingDataOptions& o) {
  uint64_t h = stamp(0xcbf29ce484222325ull, src.path);
  h = fnv(h, data::format_name(format));
  h = fnv(h, text_field);
  h = fnv(h, std::to_string(o.vocab_size));
  for (const std::string& f : hf::ModelFolder::side_files())
    if (!o.tokenizer_dir.empty() && fs::exists(fs::path(o.tokenizer_dir) / f)) h = stamp(h, (fs::path(o.tokenizer_dir) / f).string());
  fs::path root = fs::path(spec.job.output_dir) / "data-cache";
  if (!o.cache_node.empty()) root /= o.cache_node;
  return (root / fmt::format("{}-{:016x}", fs::path(src.path).filename().string(), h)).string();
}

struct Opened {
  std::shared_ptr<const data::TokenSource> tokens;
  std::string line;
};

Result<std::shared_ptr<const data::TokenSource>> open_tokens(const std::string& path, data::DataFormat f) {
  switch (f) {
    case data::DataFormat::kNanoGpt: return data::open_raw_tokens(path, data::TokenWidth::kU16);
    case data::DataFormat::kU32: return data::open_raw_tokens(path, data::TokenWidth::kU32);
    case data::DataFormat::kMegatron: return data::open_megatron(path);
    default: return data::open_cohort_shards(path);
  }
}

Result<Opened> open_source(const jobs::JobSpec& spec, const jobs::DataSource& src, const TrainingDataOptions& o,
                           collective::Communicator& world) {
  const std::string text_field = src.text_field.empty() ? spec.train.text_field : src.text_field;
  COHORT_ASSIGN_OR_RETURN(data::DataFormat format,
                          data::parse_format(src.format.empty() ? spec.train.data_format : src.format));
  if (format == data::DataFormat::kAuto) { COHORT_ASSIGN_OR_RETURN(format, data::detect_format(src.path, text_field)); }
  if (data::is_token_format(format)) {
    COHORT_ASSIGN_OR_RETURN(auto tokens, open_tokens(src.path, format));
    if (tokens->declared_vocab() > o.vocab_size)
      return invalid_argument(fmt::format("{}: written for a vocabulary of {}, larger than the model's {}", src.path,
                                          tokens->declared_vocab(), o.vocab_size));
    return Opened{tokens, fmt::format("{} ({}, {} tokens)", src.path, data::format_name(format), tokens->size())};
  }
  const std::string dir = cache_dir(spec, src, format, text_field, o);
  if (o.tokenizes && !fs::exists(fs::path(dir) / "index.json")) {
    data::TokenizeOptions t;
    t.inputs = {src.path};
    t.format = format;
    t.text_field = text_field;
    t.model_dir = o.tokenizer_dir;
    t.model_vocab = o.vocab_size;
    t.out_dir = dir;
    spdlog::info("tokenizing {} ({}) into {}", src.path, data::format_name(format), dir);
    auto report = data::tokenize_inputs(t);
    if (!report) {
      (void)world.barrier();  // release the waiting ranks; they find no cache and fail too
      return report.status();
    }
    spdlog::info("tokenized {}: {} documents, {} tokens ({} trained on) in {:.1f} s", src.path, report->documents,
                 report->tokens, report->trained_tokens, report->seconds);
  }
  COHORT_RETURN_IF_ERROR(world.barrier());
  if (!fs::exists(fs::path(dir) / "index.json"))
    return failed_precondition(src.path + ": could not be tokenized into " + dir + " (see the log of rank 0, or with "
                               "node-local storage of this node's first rank)");
  COHORT_ASSIGN_OR_RETURN(auto tokens, data::open_cohort_shards(dir));
  return Opened{tokens, fmt::format("{} ({}, {} tokens, cached in {})", src.path, data::format_name(format),
                                    tokens->size(), dir)};
}

}  // namespace

Result<TrainingData> open_training_data(const jobs::JobSpec& spec, const TrainingDataOptions& o,
                                        collective::Communicator& world) {
  const auto& t = spec.train;
  std::vector<data::WeightedSource> train, held;
  TrainingData out;
  for (size_t i = 0; i < t.data.size(); ++i) {
    auto opened = open_source(spec, t.data[i], o, world);
    if (!opened) return opened.status().with_context(fmt::format("train.data[{}]", i));
    const int64_t n = opened->tokens->size();
    const int64_t held_n = int64_t(double(n) * std::clamp(t.eval_fraction, 0.0, 1.0));
    train.push_back({data::slice_source(opened->tokens, 0, n - held_n), t.data[i].weight});
    if (held_n > t.seq_len) held.push_back({data::slice_source(opened->tokens, n - held_n, n), t.data[i].weight});
    out.summary += (out.summary.empty() ? "" : "; ") + opened->line;
  }
  data::SamplerOptions so{o.global_batch, t.seq_len, uint64_t(t.seed), true, o.vocab_size};
  auto sampler = data::BatchSampler::create(std::move(train), so);
  if (!sampler) return sampler.status().with_context("train.data");
  out.train = std::make_unique<data::BatchSampler>(std::move(*sampler));
  if (t.eval_every > 0 && !held.empty()) {
    data::SamplerOptions eo{o.eval_batch, t.seq_len, uint64_t(t.seed), false, o.vocab_size};
    auto eval = data::BatchSampler::create(std::move(held), eo);
    if (eval) out.eval = std::make_unique<data::BatchSampler>(std::move(*eval));
    else spdlog::warn("no evaluation: {}", eval.status().message());
  }
  return out;
}

}  // namespace cohort::train
