// safetensors files: read (mmapped, so a tensor-parallel rank touches only the
// pages of its own slices) and write, single file or sharded with HF's
// model.safetensors.index.json.
//
// Format: 8-byte little-endian header length, a JSON header mapping names to
// {dtype, shape, data_offsets: [begin, end)} (plus optional "__metadata__"),
// then the raw little-endian data. Readers convert F32/BF16/F16 to f32.
// All functions return Status errors naming the file and tensor at fault.
// An open file is read-only and its const methods may be called from several
// threads; it unmaps on destruction.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/tensor.h"

namespace cohort::hf {

using models::DType;

struct SafetensorsInfo {
  // Tensors of other dtypes (F64, I64, U8, BOOL, F8...) are listed with
  // supported == false: present in the file, an error only when read.
  bool supported = true;
  std::string dtype_name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte offsets into the data section
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsInfo* find(const std::string& name) const;
  // Reads the whole tensor into out (numel floats).
  Status read_f32(const std::string& name, float* out) const;
  // Rows [begin, end) of dimension 0 (any rank >= 1), as f32.
  Status read_rows_f32(const std::string& name, int64_t begin, int64_t end, float* out) const;
  // Columns [begin, end) of a 2-D tensor, as f32 ([rows, end - begin]).
  Status read_cols_f32(const std::string& name, int64_t begin, int64_t end, float* out) const;
  // Rows [row_begin, row_end) and columns [col_begin, col_end) of the tensor
  // seen as 2-D (its last dimension the columns, all others the rows), as
  // f32 ([row_end - row_begin, col_end - col_begin]): one expert's slice of
  // a 3-D tensor of experts.
  Status read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end, int64_t col_begin,
                        int64_t col_end, float* out) const;
  // The bytes `name` holds in the file, whatever its dtype: quantized
  // weights' F8_E4M3 and I32 tensors, which hf/quantized_tensors.h decodes.
  Result<std::string_view> raw_bytes(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  Result<const SafetensorsInfo*> lookup(const std::string& name) const;
  std::string path_;
  const char* map_ = nullptr;
  size_t map_size_ = 0;
  const char* data_ = nullptr;  // start of the data section
  std::map<std::string, SafetensorsInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model folder's weights: model.safetensors, or the shards an
// index names. Files open lazily and stay mapped while the object lives.
class SafetensorsCheckpoint {
 public:
  static Result<SafetensorsCheckpoint> open(const std::string& dir);
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return file_of_.count(name) > 0; }
  // The file holding `name`, or an error naming the folder.
  Result<const SafetensorsFile*> file(const std::string& name) const;

 private:
  std::string dir_;
  std::map<std::string, std::string> file_of_;  // tensor name -> file name
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;
};

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // host f32, converted to `dtype` on write
  DType dtype = DType::kBF16;
};

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});
// Writes `dir`/model.safetensors, or, above max_shard_bytes, numbered shards
// model-0000i-of-0000n.safetensors with model.safetensors.index.json.
Status write_safetensors_folder(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                size_t max_shard_bytes = size_t{5} << 30);

}  // namespace cohort::hf
