// Parallel, deterministic tokenization into shards.
#include "data/tokenize.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/shard_format.h"
#include "data/text_encoder.h"

namespace cohort::data {
namespace {

namespace fs = std::filesystem;
constexpr size_t kChunkBytes = 2 << 20;

struct WorkItem {
  std::string path;
  DataFormat format;
  uint64_t offset = 0, length = 0;  // JSONL: a run of whole lines
  int first_line = 1;
};

struct ItemResult {
  std::vector<EncodedDocument> docs;
  std::vector<std::string> errors;
  int64_t bad_lines = 0;
};

Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec)) return not_found(in + ": no such file or folder");
    if (!fs::is_directory(in, ec)) {
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(in, ec))
      if (e.is_regular_file()) found.push_back(e.path().string());
    if (ec) return io_error("listing " + in + ": " + ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// JSONL files in ~2 MB runs of whole lines; a text file is one item (one document).
Result<std::vector<WorkItem>> plan_items(const std::vector<std::string>& files, const TokenizeOptions& o, int64_t* bytes) {
  std::vector<WorkItem> items;
  for (const auto& path : files) {
    DataFormat f = o.format;
    if (f == DataFormat::kAuto) { COHORT_ASSIGN_OR_RETURN(f, detect_format(path, o.text_field)); }
    if (is_token_format(f)) return invalid_argument(path + ": already tokens (" + format_name(f) + "); train on it directly");
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return io_error(path + ": " + ec.message());
    *bytes += int64_t(size);
    if (f == DataFormat::kText) {
      items.push_back(WorkItem{path, f, 0, size, 1});
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return errno_error("reading " + path);
    uint64_t at = 0;
    int line = 1;
    std::string buf;
    while (at < size) {
      uint64_t end = std::min<uint64_t>(size, at + kChunkBytes);
      in.seekg(std::streamoff(end));
      std::string rest;
      if (end < size && std::getline(in, rest)) end = std::min<uint64_t>(size, end + rest.size() + 1);
      in.clear();
      items.push_back(WorkItem{path, f, at, end - at, line});
      buf.resize(size_t(end - at));
      in.seekg(std::streamoff(at));
      in.read(buf.data(), std::streamsize(buf.size()));
      line += int(std::count(buf.begin(), buf.end(), '\n'));
      at = end;
    }
  }
  return items;
}

ItemResult run_item(const WorkItem& item, TextEncoder& enc, const TokenizeOptions& o) {
  ItemResult r;
  std::ifstream in(item.path, std::ios::binary);
  std::string text(size_t(item.length), '\0');
  in.seekg(std::streamoff(item.offset));
  in.read(text.data(), std::streamsize(text.size()));
  if (!in) {
    r.errors.push_back(item.path + ": cannot read");
    r.bad_lines = 1;
    return r;
  }
  if (item.format == DataFormat::kText) {
    if (!text.empty()) r.docs.push_back(enc.encode_text(text));
    return r;
  }
  size_t start = 0;
  for (int line = item.first_line; start < text.size(); ++line) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string l = text.substr(start, nl - start);
    start = nl + 1;
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto doc = enc.encode_line(l, item.format, o.text_field);
    if (doc) {
      r.docs.push_back(std::move(*doc));
    } else {
      ++r.bad_lines;
      r.errors.push_back(item.path + ":" + std::to_string(line) + ": " + doc.status().message());
    }
  }
  return r;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  return buf;
}

void draw_progress(int64_t done, int64_t total, int64_t tokens, double seconds) {
  const double frac = total > 0 ? double(done) / double(total) : 1.0;
  const int width = 28, filled = int(frac * width);
  const double rate = seconds > 0 ? double(done) / seconds : 0;
  const double eta = rate > 0 ? double(total - done) / rate : 0;
  std::fprintf(stderr, "\rtokenize [%s%s] %3.0f%%  %s of %s  %s/s  %.2fM tok/s  ETA %d:%02d ",
               std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '-').c_str(), frac * 100,
               human_bytes(double(done)).c_str(), human_bytes(double(total)).c_str(), human_bytes(rate).c_str(),
               seconds > 0 ? double(tokens) / seconds / 1e6 : 0.0, int(eta) / 60, int(eta) % 60);
  std::fflush(stderr);
}

// Shards in order; rolls over at shard_tokens (a document never straddles two).
class ShardSet {
 public:
  ShardSet(std::string dir, uint32_t vocab, bool mask, int64_t limit) : dir_(std::move(dir)), vocab_(vocab), mask_(mask), limit_(limit) {}
  Status add(const EncodedDocument& d) {
    if (!writer_ || (int64_t(writer_->tokens()) > 0 && int64_t(writer_->tokens() + d.tokens.size()) > limit_)) {
      COHORT_RETURN_IF_ERROR(close());
      char name[32];
      std::snprintf(name, sizeof name, "shard-%05zu.tokens", shards_.size());
      COHORT_ASSIGN_OR_RETURN(writer_, ShardWriter::create((fs::path(dir_) / name).string(), vocab_, mask_));
      shards_.push_back({{"file", name}});
    }
    return writer_->add_document(d.tokens, d.mask);
  }
  Status close() {
    if (!writer_) return Status::ok();
    shards_.back()["tokens"] = writer_->tokens();
    shards_.back()["documents"] = writer_->documents();
    COHORT_RETURN_IF_ERROR(writer_->finish());
    writer_.reset();
    return Status::ok();
  }
  const nlohmann::json& shards() const { return shards_; }

 private:
  std::string dir_;
  uint32_t vocab_;
  bool mask_;
  int64_t limit_;
  std::unique_ptr<ShardWriter> writer_;
  nlohmann::json shards_ = nlohmann::json::array();
};

}  // namespace

Result<TokenizeReport> tokenize_inputs(const TokenizeOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  if (o.inputs.empty()) return invalid_argument("tokenize: no inputs");
  if (!o.validate_only && o.out_dir.empty()) return invalid_argument("tokenize: --out is required (or --validate-only)");
  COHORT_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_inputs(o.inputs));
  TokenizeReport report;
  COHORT_ASSIGN_OR_RETURN(std::vector<WorkItem> items, plan_items(files, o, &report.bytes));
  COHORT_ASSIGN_OR_RETURN(auto encoder, TextEncoder::open(o.model_dir, o.model_vocab));
  const int vocab = o.model_vocab > 0 ? o.model_vocab : encoder->vocab_size();
  const bool masked = std::any_of(items.begin(), items.end(), [](const WorkItem& w) {
    return w.format == DataFormat::kChat || w.format == DataFormat::kPromptCompletion;
  });
  const int threads = std::max(1, o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency()));

  std::string tmp_dir;
  std::unique_ptr<ShardSet> shards;
  if (!o.validate_only) {
    tmp_dir = o.out_dir + ".tmp-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
    fs::create_directories(tmp_dir, ec);
    if (ec) return io_error("cannot create " + tmp_dir + ": " + ec.message());
    shards = std::make_unique<ShardSet>(tmp_dir, uint32_t(vocab), masked, o.shard_tokens);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::map<size_t, ItemResult> done;
  size_t next_item = 0, written = 0;
  bool stop = false;
  std::atomic<int64_t> bytes_done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, enc = encoder->clone()]() mutable {
      for (;;) {
        size_t k;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || next_item >= items.size() || next_item < written + size_t(4 * threads); });
          if (stop || next_item >= items.size()) return;
          k = next_item++;
        }
        ItemResult r = run_item(items[k], *enc, o);
        bytes_done += int64_t(items[k].length);
        std::lock_guard<std::mutex> lock(mu);
        done.emplace(k, std::move(r));
        cv.notify_all();
      }
    });
  }

  const bool bar = o.progress && ::isatty(2);
  Status failure = Status::ok();
  auto last_draw = std::chrono::steady_clock::now();
  while (written < items.size() && failure.is_ok()) {
    ItemResult r;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return done.count(written) > 0; });
      auto it = done.find(written);
      if (it != done.end()) {
        r = std::move(it->second);
        done.erase(it);
        ++written;
        cv.notify_all();
      }
    }
    for (const auto& e : r.errors)
      if (report.errors.size() < o.max_errors) report.errors.push_back(e);
    report.bad_lines += r.bad_lines;
    if (!o.validate_only && r.bad_lines > 0) failure = invalid_argument(r.errors.front());
    for (const auto& d : r.docs) {
      report.tokens += int64_t(d.tokens.size());
      report.documents += 1;
      report.trained_tokens += d.mask.empty() ? int64_t(d.tokens.size()) : int64_t(std::count(d.mask.begin(), d.mask.end(), 1));
      if (shards && failure.is_ok()) {
        Status s = shards->add(d);
        if (!s.is_ok()) failure = s.with_context(items[written - 1].path);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (bar && now - last_draw > std::chrono::milliseconds(200)) {
      draw_progress(bytes_done, report.bytes, report.tokens, std::chrono::duration<double>(now - started).count());
      last_draw = now;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
    cv.notify_all();
  }
  for (auto& t : pool) t.join();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (bar) {
    draw_progress(report.bytes, report.bytes, report.tokens, report.seconds);
    std::fprintf(stderr, "\n");
  }
  if (shards && failure.is_ok()) failure = shards->close();
  if (!failure.is_ok() || o.validate_only) {
    std::error_code ec;
    if (!tmp_dir.empty()) fs::remove_all(tmp_dir, ec);
    if (!failure.is_ok()) return failure;
    return report;
  }
  nlohmann::json index = {{"format", kShardFolderFormat}, {"vocab_size", vocab}, {"loss_mask", masked},
                          {"tokens", report.tokens}, {"documents", report.documents},
                          {"tokenizer", {{"source", encoder->source()}, {"vocab_size", encoder->vocab_size()},
                                         {"eos", encoder->eos() ? nlohmann::json(*encoder->eos()) : nlohmann::json()}}},
                          {"inputs", files}, {"shards", shards->shards()}};
  for (const auto& s : shards->shards()) report.shards.push_back((fs::path(o.out_dir) / s["file"].get<std::string>()).string());
  std::ofstream(fs::path(tmp_dir) / "index.json") << index.dump(2) << "\n";
  std::error_code ec;
  fs::remove_all(o.out_dir, ec);
  fs::rename(tmp_dir, o.out_dir, ec);
  if (ec) return io_error("renaming " + tmp_dir + " to " + o.out_dir + ": " + ec.message());
  return report;
}

}  // namespace cohort::data
