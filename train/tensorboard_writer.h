// TensorBoardWriter: scalar summaries in TensorBoard's event-file format,
// written by rank 0 under output_dir/tensorboard when train.tensorboard is on.
//
// The file is a sequence of TFRecords:
//   uint64 length (little-endian) · uint32 masked_crc32c(length bytes)
//   · data[length] · uint32 masked_crc32c(data)
// where masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 over
// CRC-32C (Castagnoli). Each record's data is a serialized tensorflow.Event,
// encoded here by hand (no protobuf dependency for five fields):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record is {wall_time, file_version: "brain.Event:2"}, as
// TensorFlow's writers put it.
//
// Errors: open() fails when the folder or file cannot be created; a failed
// write is returned and the writer stays usable. Threading: one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace cohort::train {

// CRC-32C (Castagnoli), and TFRecord's masked form of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One TFRecord around `data`.
std::string tfrecord(std::string_view data);

// Serialized Event messages.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& scalars);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<unix seconds>.<host> file
  // in it (a resumed run adds a file; TensorBoard reads them as one run).
  static Result<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir, double wall_time);
  ~TensorBoardWriter();

  Status add_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  Status write_record(const std::string& event);

  std::FILE* file_;
  std::string path_;
};

}  // namespace cohort::train
