// The shard header, checked on open, and the streaming writer.
#include "data/shard_format.h"

#include <cstring>
#include <filesystem>

namespace cohort::data {
namespace {

uint32_t get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

Result<ShardHeader> parse_shard_header(const uint8_t* data, size_t size, const std::string& path) {
  auto bad = [&](const std::string& what) { return invalid_argument(path + ": " + what + " (not a cohort shard, or damaged; rewrite it with `cohort tokenize`)"); };
  if (size < 64 || std::memcmp(data, kShardMagic, 8) != 0) return bad("no COHORTSH header");
  ShardHeader h;
  h.version = get32(data + 8);
  h.token_bytes = get32(data + 12);
  h.vocab_size = get32(data + 16);
  h.flags = get32(data + 20);
  h.tokens = get64(data + 24);
  h.documents = get64(data + 32);
  h.tokens_offset = get64(data + 40);
  h.mask_offset = get64(data + 48);
  h.documents_offset = get64(data + 56);
  if (h.version != 1) return bad("version " + std::to_string(h.version) + " is not 1");
  if (h.token_bytes != 2 && h.token_bytes != 4) return bad("token width " + std::to_string(h.token_bytes));
  const uint64_t token_end = h.tokens_offset + h.tokens * h.token_bytes;
  if (h.tokens_offset < 64 || h.tokens > (uint64_t(1) << 40) || token_end > size) return bad("the tokens run past the end of the file");
  if (h.has_mask() && (h.mask_offset < token_end || h.mask_offset + h.tokens > size)) return bad("the loss mask runs past the end of the file");
  if (h.documents > h.tokens + 1 || h.documents_offset + (h.documents + 1) * 8 > size) return bad("the document index runs past the end of the file");
  return h;
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::create(const std::string& path, uint32_t vocab_size, bool with_mask) {
  std::unique_ptr<ShardWriter> w(new ShardWriter());
  w->path_ = path;
  w->header_.vocab_size = vocab_size;
  w->header_.token_bytes = vocab_size <= 65536 ? 2 : 4;
  w->header_.flags = with_mask ? 1u : 0u;
  w->file_ = std::fopen(path.c_str(), "wb");
  if (!w->file_) return errno_error("creating " + path);
  uint8_t zeros[64] = {0};
  if (std::fwrite(zeros, 1, 64, w->file_) != 64) return errno_error("writing " + path);
  if (with_mask) {
    w->mask_path_ = path + ".mask.tmp";
    w->mask_file_ = std::fopen(w->mask_path_.c_str(), "w+b");
    if (!w->mask_file_) return errno_error("creating " + w->mask_path_);
  }
  return w;
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
  if (mask_file_) {
    std::fclose(mask_file_);
    std::remove(mask_path_.c_str());
  }
}

Status ShardWriter::add_document(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask) {
  std::vector<uint8_t> bytes(tokens.size() * header_.token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(tokens[i]);
    if (tokens[i] < 0 || v >= header_.vocab_size)
      return invalid_argument("token " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                              std::to_string(header_.vocab_size));
    if (header_.token_bytes == 2) {
      bytes[2 * i] = uint8_t(v), bytes[2 * i + 1] = uint8_t(v >> 8);
    } else {
      std::memcpy(&bytes[4 * i], &v, 4);
    }
  }
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) return errno_error("writing " + path_);
  if (mask_file_) {
    std::vector<uint8_t> m = mask.empty() ? std::vector<uint8_t>(tokens.size(), 1) : mask;
    if (!m.empty() && std::fwrite(m.data(), 1, m.size(), mask_file_) != m.size()) return errno_error("writing " + mask_path_);
  }
  header_.tokens += tokens.size();
  header_.documents += 1;
  doc_offsets_.push_back(header_.tokens);
  return Status::ok();
}

Status ShardWriter::finish() {
  uint64_t at = 64 + header_.tokens * header_.token_bytes;
  if (mask_file_) {
    header_.mask_offset = at;
    std::rewind(mask_file_);
    std::vector<uint8_t> chunk(1 << 20);
    for (size_t n; (n = std::fread(chunk.data(), 1, chunk.size(), mask_file_)) > 0;)
      if (std::fwrite(chunk.data(), 1, n, file_) != n) return errno_error("writing " + path_);
    at += header_.tokens;
  }
  header_.documents_offset = at;
  if (std::fwrite(doc_offsets_.data(), 8, doc_offsets_.size(), file_) != doc_offsets_.size())
    return errno_error("writing " + path_);
  uint8_t head[64] = {0};
  std::memcpy(head, kShardMagic, 8);
  put32(head + 8, header_.version);
  put32(head + 12, header_.token_bytes);
  put32(head + 16, header_.vocab_size);
  put32(head + 20, header_.flags);
  put64(head + 24, header_.tokens);
  put64(head + 32, header_.documents);
  put64(head + 40, header_.tokens_offset);
  put64(head + 48, header_.mask_offset);
  put64(head + 56, header_.documents_offset);
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(head, 1, 64, file_) != 64) return errno_error("writing " + path_);
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return errno_error("closing " + path_);
  return Status::ok();
}

}  // namespace cohort::data
