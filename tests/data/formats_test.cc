// Token file formats read in place (cohort shards, nanoGPT .bin, .u32,
// Megatron .bin + .idx), format detection by content, the probe that
// `cohort validate` runs, and a 2 GB shard that stays out of memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "data/batch_sampler.h"
#include "data/data_format.h"
#include "data/shard_format.h"
#include "data/token_source.h"
#include "tests/data/data_fixture.h"

namespace cohort::data {
namespace {

using testing::data_scratch;
namespace fs = std::filesystem;

std::vector<int32_t> read_all(const TokenSource& s, std::vector<uint8_t>* mask = nullptr) {
  std::vector<int32_t> t(size_t(s.size()));
  std::vector<uint8_t> m(t.size());
  s.read(0, s.size(), t.data(), m.data());
  if (mask) *mask = m;
  return t;
}

void write_bytes(const fs::path& p, const void* data, size_t n) {
  std::ofstream(p, std::ios::binary).write(static_cast<const char*>(data), std::streamsize(n));
}

TEST(Shards, WriteAndMapBackWithMaskAndDocuments) {
  const auto dir = data_scratch("shards");
  auto w = std::move(ShardWriter::create((dir / "a.tokens").string(), 300, true).value());
  ASSERT_TRUE(w->add_document({1, 2, 299}, {0, 1, 1}).is_ok());
  ASSERT_TRUE(w->add_document({7}, {}).is_ok());
  EXPECT_FALSE(w->add_document({300}, {}).is_ok());  // outside the vocabulary
  ASSERT_TRUE(w->finish().is_ok());
  auto s = std::move(open_cohort_shards((dir / "a.tokens").string()).value());
  std::vector<uint8_t> mask;
  EXPECT_EQ(read_all(*s, &mask), (std::vector<int32_t>{1, 2, 299, 7}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_TRUE(s->has_loss_mask());
  EXPECT_EQ(s->declared_vocab(), 300);
  auto file = std::move(MappedFile::open((dir / "a.tokens").string()).value());
  auto h = parse_shard_header(file->data(), file->size(), "a");
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->documents, 2u);
  EXPECT_EQ(h->token_bytes, 2u);
  // Wide vocabularies are stored as uint32.
  auto wide = std::move(ShardWriter::create((dir / "b.tokens").string(), 151936, false).value());
  ASSERT_TRUE(wide->add_document({151935, 0}, {}).is_ok());
  ASSERT_TRUE(wide->finish().is_ok());
  EXPECT_EQ(read_all(*open_cohort_shards((dir / "b.tokens").string()).value()), (std::vector<int32_t>{151935, 0}));
  // A damaged header is refused with the file named.
  std::ofstream(dir / "bad.tokens", std::ios::binary) << "COHORTSH" << std::string(60, '\xff');
  auto bad = open_cohort_shards((dir / "bad.tokens").string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("bad.tokens"), std::string::npos);
}

TEST(TokenFiles, NanoGptUint16AndUint32) {
  const auto dir = data_scratch("raw");
  const uint16_t u16[] = {0, 1, 65535, 300};
  write_bytes(dir / "train.bin", u16, sizeof u16);
  EXPECT_EQ(read_all(*open_raw_tokens((dir / "train.bin").string(), TokenWidth::kU16).value()),
            (std::vector<int32_t>{0, 1, 65535, 300}));
  const uint32_t u32[] = {70000, 151643};
  write_bytes(dir / "t.u32", u32, sizeof u32);
  EXPECT_EQ(read_all(*open_raw_tokens((dir / "t.u32").string(), TokenWidth::kU32).value()),
            (std::vector<int32_t>{70000, 151643}));
  write_bytes(dir / "odd.bin", "abc", 3);
  EXPECT_FALSE(open_raw_tokens((dir / "odd.bin").string(), TokenWidth::kU16).is_ok());
}

// A Megatron indexed dataset as megatron-core writes it (MMIDIDX, version 1,
// dtype code, sequence and document counts, sizes, pointers, doc index).
void write_megatron(const fs::path& prefix, const std::vector<std::vector<int32_t>>& docs, uint8_t code) {
  std::string idx("MMIDIDX\0\0", 9), bin;
  const uint64_t version = 1, n = docs.size(), doc_count = n + 1;
  idx.append(reinterpret_cast<const char*>(&version), 8);
  idx.push_back(char(code));
  idx.append(reinterpret_cast<const char*>(&n), 8);
  idx.append(reinterpret_cast<const char*>(&doc_count), 8);
  std::vector<int64_t> pointers;
  for (const auto& d : docs) {
    const int32_t size = int32_t(d.size());
    idx.append(reinterpret_cast<const char*>(&size), 4);
    pointers.push_back(int64_t(bin.size()));
    for (int32_t t : d) {
      if (code == 8) {
        const uint16_t v = uint16_t(t);
        bin.append(reinterpret_cast<const char*>(&v), 2);
      } else {
        bin.append(reinterpret_cast<const char*>(&t), 4);
      }
    }
  }
  for (int64_t p : pointers) idx.append(reinterpret_cast<const char*>(&p), 8);
  for (int64_t d = 0; d <= int64_t(n); ++d) idx.append(reinterpret_cast<const char*>(&d), 8);
  write_bytes(prefix.string() + ".idx", idx.data(), idx.size());
  write_bytes(prefix.string() + ".bin", bin.data(), bin.size());
}

TEST(TokenFiles, MegatronIndexedDatasets) {
  const auto dir = data_scratch("megatron");
  write_megatron(dir / "c4_text_document", {{5, 6, 7}, {8, 9}}, 8);
  EXPECT_EQ(read_all(*open_megatron((dir / "c4_text_document.bin").string()).value()),
            (std::vector<int32_t>{5, 6, 7, 8, 9}));
  write_megatron(dir / "wide", {{100000, 1}}, 4);
  EXPECT_EQ(read_all(*open_megatron((dir / "wide").string()).value()), (std::vector<int32_t>{100000, 1}));
  std::ofstream(dir / "junk.idx") << "not an index";
  std::ofstream(dir / "junk.bin") << "xx";
  EXPECT_FALSE(open_megatron((dir / "junk.bin").string()).is_ok());
}

TEST(Formats, AutoDecidesByContentAndHeader) {
  const auto dir = data_scratch("detect");
  write_megatron(dir / "m", {{1, 2}}, 8);
  const uint16_t u16[] = {1, 2};
  write_bytes(dir / "nano.bin", u16, sizeof u16);
  auto w = std::move(ShardWriter::create((dir / "s.data").string(), 10, false).value());
  ASSERT_TRUE(w->add_document({1}, {}).is_ok());
  ASSERT_TRUE(w->finish().is_ok());
  std::ofstream(dir / "chat.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}]})" << "\n";
  std::ofstream(dir / "pc.json") << R"({"prompt": "a", "completion": "b"})" << "\n";
  std::ofstream(dir / "t.jsonl") << "\n" << R"({"body": "x"})" << "\n";
  std::ofstream(dir / "notes.txt") << "{ this is prose }";
  auto detect = [&](const char* f, const std::string& field = "text") { return detect_format((dir / f).string(), field); };
  EXPECT_EQ(*detect("m.bin"), DataFormat::kMegatron);
  EXPECT_EQ(*detect("nano.bin"), DataFormat::kNanoGpt);
  EXPECT_EQ(*detect("s.data"), DataFormat::kCohort);  // the header, whatever the name
  EXPECT_EQ(*detect("chat.jsonl"), DataFormat::kChat);
  EXPECT_EQ(*detect("pc.json"), DataFormat::kPromptCompletion);
  EXPECT_EQ(*detect("t.jsonl", "body"), DataFormat::kJsonl);
  EXPECT_EQ(*detect("notes.txt"), DataFormat::kText);
  auto unknown = detect("t.jsonl");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("t.jsonl:2: JSONL with none of \"text\""), std::string::npos)
      << unknown.status().message();
}

TEST(Formats, ProbeReportsTheBadLineWithItsPosition) {
  const auto dir = data_scratch("probe");
  std::ofstream(dir / "c.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                                 << "\n\n" << R"({"messages": [{"content": "no role"}]})" << "\n";
  auto r = probe_data((dir / "c.jsonl").string(), DataFormat::kAuto, "text");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("c.jsonl:3: messages[0] has no \"role\" string"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(probe_data((dir / "missing.bin").string(), DataFormat::kAuto, "text").is_ok());
  std::ofstream(dir / "odd.bin") << "abc";
  auto odd = probe_data((dir / "odd.bin").string(), DataFormat::kNanoGpt, "text");
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("3 bytes is not a whole number of 2-byte tokens"), std::string::npos);
}

TEST(Formats, AnUnknownChatRoleIsNamedWithItsLineAndMessage) {
  const auto dir = data_scratch("roles");
  std::ofstream(dir / "c.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                                 << "\n" << R"({"messages": [{"role": "user", "content": "a"}, {"role": "asistant", "content": "b"}]})"
                                 << "\n";
  auto r = probe_data((dir / "c.jsonl").string(), DataFormat::kChat, "text");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("c.jsonl:2: messages[1].role \"asistant\" is not a chat role"), std::string::npos)
      << r.status().message();
  std::ofstream(dir / "h.jsonl") << R"({"messages": [{"role": "human", "content": "a"}, {"role": "assistant", "content": "b"}]})"
                                 << "\n";
  auto human = probe_data((dir / "h.jsonl").string(), DataFormat::kChat, "text");
  ASSERT_FALSE(human.is_ok());
  EXPECT_NE(human.status().message().find("messages[0].role \"human\""), std::string::npos) << human.status().message();
}

int64_t resident_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}

// A 2 GB shard (sparse, so written in no time): sampling from it maps a few
// pages per window, never the file.
TEST(Shards, ATwoGigabyteShardIsSampledWithoutReadingItWhole) {
  const auto dir = data_scratch("large");
  const std::string path = (dir / "large.tokens").string();
  const uint64_t tokens = uint64_t(1) << 30;  // uint16: 2 GiB of tokens
  ShardHeader h;
  h.vocab_size = 256;
  h.tokens = tokens;
  h.documents = 1;
  h.documents_offset = 64 + tokens * 2;
  uint8_t head[64] = {0};
  std::memcpy(head, kShardMagic, 8);
  auto put = [&](int at, uint64_t v, int n) { std::memcpy(head + at, &v, size_t(n)); };
  put(8, 1, 4), put(12, 2, 4), put(16, 256, 4), put(20, 0, 4), put(24, h.tokens, 8), put(32, 1, 8), put(40, 64, 8);
  put(48, 0, 8), put(56, h.documents_offset, 8);
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, head, 64, 0), 64);
  const uint64_t offsets[2] = {0, tokens};
  ASSERT_EQ(::pwrite(fd, offsets, 16, off_t(h.documents_offset)), 16);
  ::close(fd);
  ASSERT_GE(fs::file_size(path), tokens * 2);
  const int64_t before = resident_kb();
  auto source = std::move(open_cohort_shards(path).value());
  auto sampler = std::move(BatchSampler::create({{source}}, SamplerOptions{16, 256, 1, true, 256}).value());
  std::vector<int32_t> in(16 * 256), tgt(in.size());
  for (int step = 0; step < 200; ++step) ASSERT_TRUE(sampler.fill(step, 0, 16, in.data(), tgt.data()).is_ok());
  const int64_t grown_mb = (resident_kb() - before) / 1024;
  std::printf("2 GiB shard: %lld windows, resident memory grew by %lld MB over 200 batches\n",
              (long long)sampler.windows(), (long long)grown_mb);
  EXPECT_LT(grown_mb, 64);
  fs::remove(path);
}

}  // namespace
}  // namespace cohort::data
