// `cohort tokenize`: text, JSONL and chat files to cohort shards, in
// parallel over the machine's cores, with the same output whatever the
// thread count (work is cut into items in input order and written in that
// order). The trainer calls the same code to prepare text data it is given
// directly (train/training_data.cc).
//
// Output: `out_dir/shard-NNNNN.tokens` (shard_format.h) and `index.json`,
// written into a temporary folder renamed into place at the end, so a folder
// with an index.json is always complete. --validate-only reads and
// tokenizes everything, counts tokens, and reports every bad line as
// `file:line: reason` without writing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/data_format.h"

namespace cohort::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // files or folders (folders: their files, sorted)
  DataFormat format = DataFormat::kAuto;  // kAuto: per input file
  std::string text_field = "text";
  std::string model_dir;             // a Hugging Face folder; "" with model_vocab 256: bytes
  int model_vocab = 0;               // 0: the tokenizer's
  std::string out_dir;
  bool validate_only = false;
  int threads = 0;                   // 0: the machine's cores
  int64_t shard_tokens = int64_t(1) << 28;
  bool progress = false;             // a progress bar on stderr (when it is a terminal)
  size_t max_errors = 50;            // bad lines listed in a report
};

struct TokenizeReport {
  int64_t tokens = 0, documents = 0, trained_tokens = 0, bytes = 0;
  int64_t bad_lines = 0;
  std::vector<std::string> errors;   // "file:line: reason", in input order (at most max_errors)
  std::vector<std::string> shards;
  double seconds = 0;
};

// Errors: an unreadable input, a model without a tokenizer; when not
// validating, also the first bad line (nothing is written then).
Result<TokenizeReport> tokenize_inputs(const TokenizeOptions& options);

}  // namespace cohort::data
