// Memory-mapped token sources: cohort shards, header-less token files and
// Megatron indexed datasets.
#include "data/token_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/shard_format.h"

namespace cohort::data {
namespace fs = std::filesystem;

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return errno_error("reading the size of " + path);
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return errno_error("mapping " + path);
    }
    ::madvise(p, m->size_, MADV_RANDOM);
    m->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(std::move(m));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

// Tokens of one width at a byte offset of a mapped file, with an optional mask.
class MappedTokens final : public TokenSource {
 public:
  MappedTokens(std::shared_ptr<const MappedFile> file, uint64_t offset, int64_t count, int width, bool is_signed,
               uint64_t mask_offset, int64_t vocab, std::string what)
      : file_(std::move(file)), offset_(offset), count_(count), width_(width), signed_(is_signed),
        mask_offset_(mask_offset), vocab_(vocab), what_(std::move(what)) {}
  int64_t size() const override { return count_; }
  bool has_loss_mask() const override { return mask_offset_ != 0; }
  int64_t declared_vocab() const override { return vocab_; }
  std::string describe() const override { return what_; }
  void read(int64_t begin, int64_t n, int32_t* tokens, uint8_t* mask) const override {
    const uint8_t* p = file_->data() + offset_ + uint64_t(begin) * uint64_t(width_);
    for (int64_t i = 0; i < n; ++i, p += width_) {
      if (width_ == 2) {
        const uint16_t v = uint16_t(p[0] | (p[1] << 8));
        tokens[i] = signed_ ? int32_t(int16_t(v)) : int32_t(v);
      } else if (width_ == 4) {
        int32_t v;
        std::memcpy(&v, p, 4);
        tokens[i] = v;
      } else if (width_ == 8) {
        int64_t v;
        std::memcpy(&v, p, 8);
        tokens[i] = v > INT32_MAX || v < INT32_MIN ? -1 : int32_t(v);
      } else {
        tokens[i] = signed_ ? int32_t(int8_t(p[0])) : int32_t(p[0]);
      }
    }
    if (!mask) return;
    if (mask_offset_) std::memcpy(mask, file_->data() + mask_offset_ + uint64_t(begin), size_t(n));
    else std::memset(mask, 1, size_t(n));
  }

 private:
  std::shared_ptr<const MappedFile> file_;
  uint64_t offset_;
  int64_t count_;
  int width_;
  bool signed_;
  uint64_t mask_offset_;
  int64_t vocab_;
  std::string what_;
};

// Several sources read as one stream, in order.
class ConcatSource final : public TokenSource {
 public:
  explicit ConcatSource(std::vector<std::shared_ptr<const TokenSource>> parts, std::string what)
      : parts_(std::move(parts)), what_(std::move(what)) {
    starts_.push_back(0);
    for (const auto& p : parts_) {
      starts_.push_back(starts_.back() + p->size());
      mask_ = mask_ || p->has_loss_mask();
      vocab_ = std::max(vocab_, p->declared_vocab());
    }
  }
  int64_t size() const override { return starts_.back(); }
  bool has_loss_mask() const override { return mask_; }
  int64_t declared_vocab() const override { return vocab_; }
  std::string describe() const override { return what_; }
  void read(int64_t begin, int64_t n, int32_t* tokens, uint8_t* mask) const override {
    size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
    while (n > 0 && k < parts_.size()) {
      const int64_t local = begin - starts_[k], take = std::min(n, parts_[k]->size() - local);
      parts_[k]->read(local, take, tokens, mask);
      tokens += take;
      if (mask) mask += take;
      begin += take, n -= take, ++k;
    }
  }

 private:
  std::vector<std::shared_ptr<const TokenSource>> parts_;
  std::vector<int64_t> starts_;
  bool mask_ = false;
  int64_t vocab_ = 0;
  std::string what_;
};

class SliceSource final : public TokenSource {
 public:
  SliceSource(std::shared_ptr<const TokenSource> s, int64_t b, int64_t e) : s_(std::move(s)), b_(b), e_(e) {}
  int64_t size() const override { return e_ - b_; }
  bool has_loss_mask() const override { return s_->has_loss_mask(); }
  int64_t declared_vocab() const override { return s_->declared_vocab(); }
  std::string describe() const override { return s_->describe(); }
  void read(int64_t begin, int64_t n, int32_t* tokens, uint8_t* mask) const override {
    s_->read(b_ + begin, n, tokens, mask);
  }

 private:
  std::shared_ptr<const TokenSource> s_;
  int64_t b_, e_;
};

Result<std::shared_ptr<const TokenSource>> open_shard_file(const std::string& path) {
  COHORT_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  COHORT_ASSIGN_OR_RETURN(ShardHeader h, parse_shard_header(file->data(), file->size(), path));
  return std::shared_ptr<const TokenSource>(new MappedTokens(file, h.tokens_offset, int64_t(h.tokens), int(h.token_bytes),
                                                             false, h.has_mask() ? h.mask_offset : 0, h.vocab_size, path));
}

}  // namespace

Result<std::shared_ptr<const TokenSource>> open_raw_tokens(const std::string& path, TokenWidth width) {
  COHORT_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  const size_t w = width == TokenWidth::kU16 ? 2 : 4;
  if (file->size() % w != 0)
    return invalid_argument(path + ": size " + std::to_string(file->size()) + " is not a multiple of the token width " +
                            std::to_string(w) + (w == 2 ? " (a nanoGPT .bin holds uint16 tokens)" : ""));
  if (file->size() == 0) return invalid_argument(path + ": empty token file");
  return std::shared_ptr<const TokenSource>(
      new MappedTokens(file, 0, int64_t(file->size() / w), int(w), false, 0, 0, path));
}

Result<std::shared_ptr<const TokenSource>> open_megatron(const std::string& path) {
  std::string prefix = path;
  for (const char* ext : {".bin", ".idx"})
    if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0) prefix.resize(prefix.size() - 4);
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  COHORT_ASSIGN_OR_RETURN(auto idx, MappedFile::open(idx_path));
  static const uint8_t kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  if (idx->size() < 34 || std::memcmp(idx->data(), kMagic, 9) != 0)
    return invalid_argument(idx_path + ": not a Megatron index (no MMIDIDX header)");
  uint64_t version;
  std::memcpy(&version, idx->data() + 9, 8);
  const uint8_t code = idx->data()[17];
  // Megatron's dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16.
  int width = 0;
  bool is_signed = true;
  switch (code) {
    case 1: width = 1, is_signed = false; break;
    case 2: width = 1; break;
    case 3: width = 2; break;
    case 4: width = 4; break;
    case 5: width = 8; break;
    case 8: width = 2, is_signed = false; break;
    default: return invalid_argument(idx_path + ": dtype code " + std::to_string(code) + " is not a token type");
  }
  if (version != 1) return invalid_argument(idx_path + ": index version " + std::to_string(version) + " (1 is read)");
  uint64_t sequences;
  std::memcpy(&sequences, idx->data() + 18, 8);
  if (34 + sequences * 12 > idx->size()) return invalid_argument(idx_path + ": the sequence table runs past the end");
  uint64_t total = 0;
  for (uint64_t s = 0; s < sequences; ++s) {
    int32_t n;
    std::memcpy(&n, idx->data() + 34 + s * 4, 4);
    total += uint64_t(std::max(n, 0));
  }
  COHORT_ASSIGN_OR_RETURN(auto bin, MappedFile::open(bin_path));
  if (total * uint64_t(width) > bin->size())
    return invalid_argument(bin_path + ": " + std::to_string(bin->size()) + " bytes, but " + idx_path + " lists " +
                            std::to_string(total) + " tokens of " + std::to_string(width) + " bytes");
  return std::shared_ptr<const TokenSource>(
      new MappedTokens(bin, 0, int64_t(total), width, is_signed, 0, 0, bin_path));
}

Result<std::shared_ptr<const TokenSource>> open_cohort_shards(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return open_shard_file(path);
  const fs::path index_path = fs::path(path) / "index.json";
  std::ifstream in(index_path);
  if (!in) return not_found(path + ": no index.json (a folder that `cohort tokenize` wrote has one)");
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kShardFolderFormat || !j.contains("shards") || !j["shards"].is_array())
    return invalid_argument(index_path.string() + ": not a " + std::string(kShardFolderFormat) + " index");
  std::vector<std::shared_ptr<const TokenSource>> parts;
  for (const auto& s : j["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string())
      return invalid_argument(index_path.string() + ": a shard entry has no \"file\"");
    COHORT_ASSIGN_OR_RETURN(auto part, open_shard_file((fs::path(path) / s["file"].get<std::string>()).string()));
    parts.push_back(std::move(part));
  }
  if (parts.empty()) return invalid_argument(index_path.string() + ": no shards");
  return std::shared_ptr<const TokenSource>(new ConcatSource(std::move(parts), path));
}

std::shared_ptr<const TokenSource> slice_source(std::shared_ptr<const TokenSource> source, int64_t begin, int64_t end) {
  return std::make_shared<SliceSource>(std::move(source), begin, end);
}

}  // namespace cohort::data
