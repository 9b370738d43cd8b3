// `cohort tokenize INPUT... --model HF_DIR --out DIR [--validate-only]`:
// text, JSONL and chat files to cohort shards with the model's tokenizer
// (data/tokenize.h). Runs in this process: data/ and the tokenizers link
// only CPU libraries. Exit code 2 for a missing or invalid input (bad lines
// included). With --json: {"validate_only", "documents", "tokens", "trained_tokens",
// "bad_lines", "errors", "bytes", "seconds", "threads", "out", "shards"}.
#include <cstdio>
#include <thread>

#include <filesystem>

#include "hf/hub_cache.h"
#include "hf/model_folder.h"
#include "cli/commands.h"
#include "cli/global_flags.h"
#include "data/tokenize.h"

namespace cohort::cli {
namespace {

struct TokenizeArgs {
  std::vector<std::string> inputs;
  std::string model, out, format = "auto", text_field = "text";
  bool validate_only = false;
  int threads = 0;
  double shard_mtokens = 256;
  JsonFlag json;
};

int run_tokenize(const TokenizeArgs& args) {
  data::TokenizeOptions o;
  o.inputs = args.inputs;
  auto format = data::parse_format(args.format);
  if (!format || data::is_token_format(*format)) {
    std::fprintf(stderr, "cohort tokenize: --format %s: one of auto, text, jsonl, chat, prompt_completion\n", args.format.c_str());
    return kExitUsage;
  }
  o.format = *format;
  o.text_field = args.text_field;
  o.model_dir = args.model;
  std::error_code missing;
  if (!o.model_dir.empty() && !std::filesystem::exists(o.model_dir, missing) && hf::looks_like_hub_id(o.model_dir)) {
    auto snapshot = hf::find_in_hub_cache(o.model_dir);  // a model id, as hf_dir takes one
    if (!snapshot) {
      std::fprintf(stderr, "cohort tokenize: --model %s\n", snapshot.status().message().c_str());
      return kExitUsage;
    }
    o.model_dir = *snapshot;
  }
  if (!o.model_dir.empty()) {  // said once, before any input is read
    auto folder = hf::ModelFolder::open(o.model_dir);
    if (!folder || !folder->has_tokenizer()) {
      std::fprintf(stderr, "cohort tokenize: --model %s\n",
                   folder ? (o.model_dir + " has no tokenizer.json or tokenizer.model (omit --model for byte tokens)").c_str()
                          : folder.status().message().c_str());
      return kExitUsage;
    }
  }
  o.out_dir = args.out;
  o.validate_only = args.validate_only;
  o.threads = args.threads;
  o.shard_tokens = int64_t(args.shard_mtokens * 1e6);
  o.progress = true;
  if (!o.validate_only && o.out_dir.empty()) {
    std::fprintf(stderr, "cohort tokenize: --out DIR is required (or --validate-only)\n");
    return kExitUsage;
  }
  auto report = data::tokenize_inputs(o);
  if (!report) {
    std::fprintf(stderr, "cohort tokenize: %s\n", report.status().message().c_str());
    return exit_code_for(report.status());
  }
  for (const auto& e : report->errors) std::fprintf(stderr, "%s\n", e.c_str());
  if (report->bad_lines > int64_t(report->errors.size()))
    std::fprintf(stderr, "... and %lld more bad lines\n", (long long)(report->bad_lines - int64_t(report->errors.size())));
  const int threads = o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency());
  // Bad lines make the input invalid: exit code 2, as for a bad job file.
  const int code = report->bad_lines > 0 ? kExitUsage : kExitOk;
  if (args.json.on()) {
    print_json({{"validate_only", o.validate_only}, {"documents", report->documents},
                {"tokens", report->tokens},         {"trained_tokens", report->trained_tokens},
                {"bad_lines", report->bad_lines},   {"errors", report->errors},
                {"bytes", report->bytes},           {"seconds", report->seconds},
                {"threads", threads},               {"out", o.validate_only ? "" : o.out_dir},
                {"shards", report->shards}});
    return code;
  }
  std::printf("%s%lld documents, %lld tokens (%lld trained on), %lld bad lines, %.1f MB in %.1f s (%d threads)\n",
              o.validate_only ? "validated: " : "", (long long)report->documents, (long long)report->tokens,
              (long long)report->trained_tokens, (long long)report->bad_lines, double(report->bytes) / 1e6,
              report->seconds, threads);
  if (!o.validate_only) std::printf("wrote %zu shard%s and index.json to %s\n", report->shards.size(),
                                    report->shards.size() == 1 ? "" : "s", o.out_dir.c_str());
  return code;
}

}  // namespace

Command add_tokenize_command(CLI::App& root) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* app = root.add_subcommand("tokenize", "Tokenize text, JSONL or chat files into training shards");
  app->add_option("inputs", args->inputs, "Files or folders (text, JSONL, chat JSONL)")->required();
  app->add_option("--model", args->model, "A Hugging Face folder with the model's tokenizer (omit for byte tokens)");
  app->add_option("--out", args->out, "The folder to write shards and index.json into");
  app->add_option("--format", args->format, "auto, text, jsonl, chat or prompt_completion (default: auto)");
  app->add_option("--text-field", args->text_field, "JSONL text data: the field holding each document");
  app->add_option("--threads", args->threads, "Worker threads (default: all cores)");
  app->add_option("--shard-mtokens", args->shard_mtokens, "Millions of tokens per shard (default: 256)");
  app->add_flag("--validate-only", args->validate_only, "Count tokens and report bad lines; write nothing");
  args->json.add_to(app);
  return Command{app, [args] { return run_tokenize(*args); }};
}

}  // namespace cohort::cli
