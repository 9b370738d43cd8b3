// Token sources: training tokens read in place from memory-mapped files,
// never loaded whole, so resident memory does not grow with the dataset.
//
//   cohort shards   written by `cohort tokenize` (shard_format.h): a header
//                   with dtype, vocabulary size and document index; an
//                   optional loss mask (chat and prompt/completion data)
//   nanoGPT .bin    uint16 tokens, little-endian, no header
//   .u32            uint32 tokens, little-endian, no header
//   Megatron        an indexed dataset: `.idx` (dtype, sequence sizes) and
//                   `.bin` (the tokens)
//
// Sources are immutable after opening and safe to read from several
// threads. Pages are advised MADV_RANDOM: a sampler touches windows, not a
// stream, and read-ahead would only fill the page cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;  // tokens
  // Whether some tokens are excluded from the loss (chat, prompt/completion).
  virtual bool has_loss_mask() const { return false; }
  // Tokens [begin, begin + n) as int32; mask[i] = 1 where the token counts
  // as a target (all 1 without a loss mask). `mask` may be null.
  virtual void read(int64_t begin, int64_t n, int32_t* tokens, uint8_t* mask) const = 0;
  // Largest vocabulary the tokens were written for (0: unknown, checked as read).
  virtual int64_t declared_vocab() const { return 0; }
  virtual std::string describe() const = 0;  // the file(s), for messages
};

enum class TokenWidth { kU16, kU32 };

// A header-less token file (nanoGPT .bin: kU16).
Result<std::shared_ptr<const TokenSource>> open_raw_tokens(const std::string& path, TokenWidth width);
// A Megatron indexed dataset: `prefix` is the path without .bin/.idx (either
// file's path is accepted too).
Result<std::shared_ptr<const TokenSource>> open_megatron(const std::string& path);
// A cohort shard file, or a folder that `cohort tokenize` wrote (its
// index.json lists the shards, read as one stream in order).
Result<std::shared_ptr<const TokenSource>> open_cohort_shards(const std::string& path);

// Tokens [begin, end) of another source (the training part or the held-out tail).
std::shared_ptr<const TokenSource> slice_source(std::shared_ptr<const TokenSource> source, int64_t begin,
                                                int64_t end);

// A read-only memory map of a whole file (released on destruction).
class MappedFile {
 public:
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace cohort::data
