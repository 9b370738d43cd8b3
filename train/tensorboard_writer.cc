#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace cohort::train {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
    table[i] = c;
  }
  return table;
}

// Protocol buffer wire format: varints, and tagged fields.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
template <typename T>
void fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64), as protobuf's wire format
  out.append(bytes, sizeof(T));
}
void bytes_field(std::string& out, int field, std::string_view data) {
  key(out, field, 2);
  varint(out, data.size());
  out.append(data);
}
void wall_time_and_step(std::string& out, double wall_time, int64_t step) {
  key(out, 1, 1);
  fixed(out, wall_time);
  if (step != 0) {
    key(out, 2, 0);
    varint(out, uint64_t(step));
  }
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  fixed(length, uint64_t(data.size()));
  std::string out = length;
  fixed(out, masked_crc32c(length));
  out.append(data);
  fixed(out, masked_crc32c(data));
  return out;
}

std::string event_file_version(double wall_time) {
  std::string out;
  wall_time_and_step(out, wall_time, 0);
  bytes_field(out, 3, "brain.Event:2");
  return out;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    bytes_field(v, 1, tag);
    key(v, 2, 5);
    fixed(v, value);
    bytes_field(summary, 1, v);
  }
  std::string out;
  wall_time_and_step(out, wall_time, step);
  bytes_field(out, 5, summary);
  return out;
}

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir, double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // TensorBoard finds files by this name; the pid keeps two writers apart.
  std::string path = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, int64_t(wall_time), host, ::getpid());
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (!file) return io_error("cannot create " + path + ": " + std::strerror(errno));
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(file, path));
  COHORT_RETURN_IF_ERROR(writer->write_record(event_file_version(wall_time)));
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

Status TensorBoardWriter::add_scalars(double wall_time, int64_t step,
                                      const std::vector<std::pair<std::string, float>>& scalars) {
  return write_record(event_scalars(wall_time, step, scalars));
}

Status TensorBoardWriter::write_record(const std::string& event) {
  std::string record = tfrecord(event);
  // Flushed per record so TensorBoard, reading as the run goes, sees whole records.
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return io_error("cannot write " + path_ + ": " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace cohort::train
