// cohort's token shard format, what `cohort tokenize` writes and the trainer
// maps. One file:
//
//   offset  size  field
//   0       8     magic "COHORTSH"
//   8       4     version (1)
//   12      4     bytes per token (2 or 4), little-endian unsigned
//   16      4     vocabulary size the tokens were written for
//   20      4     flags: bit 0 = a loss mask follows the tokens
//   24      8     tokens
//   32      8     documents
//   40      8     offset of the tokens (64)
//   48      8     offset of the loss mask (one byte per token: 1 = trained
//                 on), 0 when absent
//   56      8     offset of the document index: documents + 1 uint64 token
//                 offsets, the first 0 and the last = tokens
//
// A folder of shards has an index.json: {"format": "cohort-shards/1",
// "shards": [{"file", "tokens", "documents"}], "vocab_size", "loss_mask",
// "tokenizer": {...}, "inputs": [...]}.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::data {

inline constexpr char kShardMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'S', 'H'};
inline constexpr const char* kShardFolderFormat = "cohort-shards/1";

struct ShardHeader {
  uint32_t version = 1;
  uint32_t token_bytes = 2;
  uint32_t vocab_size = 0;
  uint32_t flags = 0;
  uint64_t tokens = 0, documents = 0;
  uint64_t tokens_offset = 64, mask_offset = 0, documents_offset = 0;
  bool has_mask() const { return flags & 1u; }
};

// Checks the header against the file size; errors name the file and field.
Result<ShardHeader> parse_shard_header(const uint8_t* data, size_t size, const std::string& path);

// Streams one shard to disk: tokens go straight to the file, the mask to a
// side file appended at finish(), so memory stays bounded by the document
// index. Not thread-safe.
class ShardWriter {
 public:
  static Result<std::unique_ptr<ShardWriter>> create(const std::string& path, uint32_t vocab_size, bool with_mask);
  ~ShardWriter();
  // `mask` empty: every token trained on.
  Status add_document(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask);
  Status finish();  // writes the mask, the document index and the header
  uint64_t tokens() const { return header_.tokens; }
  uint64_t documents() const { return header_.documents; }

 private:
  ShardWriter() = default;
  std::string path_, mask_path_;
  std::FILE* file_ = nullptr;
  std::FILE* mask_file_ = nullptr;
  ShardHeader header_;
  std::vector<uint64_t> doc_offsets_{0};
};

}  // namespace cohort::data
