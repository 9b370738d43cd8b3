// The TensorBoard event writer: CRC-32C against published vectors, and a
// file decoded record by record (framing, both CRCs, the Event fields) the
// way TensorBoard's reader walks it.
#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <gtest/gtest.h>

namespace cohort::train {
namespace {

TEST(TensorBoardWriter, Crc32cMatchesPublishedVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);                   // the CRC catalogue's check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);         // RFC 3720 B.4
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += char(i);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

// A minimal protobuf reader: field number → raw bytes of each occurrence.
std::multimap<int, std::string> fields(std::string_view msg) {
  std::multimap<int, std::string> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; i < msg.size(); shift += 7) {
      uint8_t b = uint8_t(msg[i++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < msg.size()) {
    uint64_t key = varint();
    int field = int(key >> 3), type = int(key & 7);
    if (type == 0) {
      out.emplace(field, std::to_string(varint()));
    } else if (type == 1) {
      out.emplace(field, std::string(msg.substr(i, 8))), i += 8;
    } else if (type == 5) {
      out.emplace(field, std::string(msg.substr(i, 4))), i += 4;
    } else if (type == 2) {
      size_t n = size_t(varint());
      out.emplace(field, std::string(msg.substr(i, n))), i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << type;
      break;
    }
  }
  return out;
}

template <typename T>
T as(const std::string& bytes) {
  T v{};
  EXPECT_EQ(bytes.size(), sizeof(T));
  std::memcpy(&v, bytes.data(), sizeof(T));
  return v;
}

// Splits a file into its records, checking the framing and both CRCs.
std::vector<std::string> records(const std::string& file) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < file.size()) {
    EXPECT_GE(file.size() - i, 12u);
    std::string length_bytes = file.substr(i, 8);
    uint64_t length = as<uint64_t>(length_bytes);
    EXPECT_EQ(as<uint32_t>(file.substr(i + 8, 4)), masked_crc32c(length_bytes)) << "length CRC of record " << out.size();
    std::string data = file.substr(i + 12, length);
    EXPECT_EQ(as<uint32_t>(file.substr(i + 12 + length, 4)), masked_crc32c(data)) << "data CRC of record " << out.size();
    out.push_back(data);
    i += 12 + length + 4;
  }
  EXPECT_EQ(i, file.size());
  return out;
}

TEST(TensorBoardWriter, WritesFramedEventsThatDecodeToTheScalars) {
  auto dir = std::filesystem::temp_directory_path() / ("cohort-tb-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    auto writer = TensorBoardWriter::open(dir.string(), 1764577222.25);
    ASSERT_TRUE(writer.is_ok()) << writer.status().message();
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->add_scalars(1764577223.5, 1, {{"loss", 5.5f}, {"lr", 3e-4f}}).is_ok());
    ASSERT_TRUE((*writer)->add_scalars(1764577224.5, 300, {{"eval_loss", 2.25f}}).is_ok());
  }
  EXPECT_NE(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.1764577222.", 0), std::string::npos);
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto recs = records(file);
  ASSERT_EQ(recs.size(), 3u);

  auto first = fields(recs[0]);
  EXPECT_DOUBLE_EQ(as<double>(first.find(1)->second), 1764577222.25);
  EXPECT_EQ(first.find(3)->second, "brain.Event:2");
  EXPECT_EQ(first.count(5), 0u);

  auto second = fields(recs[1]);
  EXPECT_DOUBLE_EQ(as<double>(second.find(1)->second), 1764577223.5);
  EXPECT_EQ(second.find(2)->second, "1");
  auto values = fields(second.find(5)->second);
  ASSERT_EQ(values.count(1), 2u);
  std::map<std::string, float> got;
  for (auto [it, end] = values.equal_range(1); it != end; ++it) {
    auto v = fields(it->second);
    got[v.find(1)->second] = as<float>(v.find(2)->second);
  }
  EXPECT_FLOAT_EQ(got["loss"], 5.5f);
  EXPECT_FLOAT_EQ(got["lr"], 3e-4f);

  auto third = fields(recs[2]);
  EXPECT_EQ(third.find(2)->second, "300");
  auto v = fields(fields(third.find(5)->second).find(1)->second);
  EXPECT_EQ(v.find(1)->second, "eval_loss");
  EXPECT_FLOAT_EQ(as<float>(v.find(2)->second), 2.25f);
  std::filesystem::remove_all(dir);
}

TEST(TensorBoardWriter, AFolderThatCannotBeMadeIsAnError) {
  auto writer = TensorBoardWriter::open("/proc/cohort-cannot-be-here/tb", 1.0);
  EXPECT_FALSE(writer.is_ok());
}

}  // namespace
}  // namespace cohort::train
