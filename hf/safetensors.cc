// safetensors reading (mmap) and writing.
#include "hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace cohort::hf {

using namespace models;
namespace {

using nlohmann::json;

Status bad_file(const std::string& path, const std::string& what) {
  return invalid_argument("safetensors " + path + ": " + what);
}

// Element sizes of safetensors dtypes cohort does not compute with.
size_t other_dtype_size(const std::string& name) {
  if (name == "F64" || name == "I64" || name == "U64") return 8;
  if (name == "U32") return 4;
  if (name == "I16" || name == "U16") return 2;
  if (name == "I8" || name == "U8" || name == "BOOL" || name == "F8_E4M3" || name == "F8_E5M2") {
    return 1;
  }
  return 0;
}

// Non-negative integers only: nlohmann converts a float (5.5e27) or a
// negative number to an integer type without a check, which is undefined
// behaviour or a huge size.
bool read_counts(const json& j, size_t limit, std::vector<size_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const json& v : j) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) return false;
    const uint64_t x = v.get<uint64_t>();
    if (x > limit) return false;
    out->push_back(static_cast<size_t>(x));
  }
  return true;
}

Status parse_header(const std::string& path, const std::string& text, size_t data_size,
                    std::map<std::string, SafetensorsInfo>* tensors,
                    std::map<std::string, std::string>* metadata) {
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    return bad_file(path, std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) return bad_file(path, "header is not a JSON object");
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : entry.items()) {
        if (v.is_string()) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      SafetensorsInfo info;
      info.dtype_name = entry.at("dtype").get<std::string>();
      auto dtype = parse_dtype(info.dtype_name);
      const size_t element = dtype.is_ok() ? dtype_size(*dtype) : other_dtype_size(info.dtype_name);
      if (element == 0) return bad_file(path, name + ": unknown dtype " + info.dtype_name);
      info.supported = dtype.is_ok();
      if (info.supported) info.dtype = *dtype;
      std::vector<size_t> dims, offsets;
      // A dimension beyond the data's size cannot be right (a zero elsewhere
      // aside); this also keeps the product below from overflowing.
      if (!read_counts(entry.at("shape"), data_size + 1, &dims)) {
        return bad_file(path, name + ": shape must be a list of non-negative integers no larger "
                                     "than the data");
      }
      if (!read_counts(entry.at("data_offsets"), data_size, &offsets) || offsets.size() != 2) {
        return bad_file(path, name + ": data_offsets needs 2 non-negative integers within the data");
      }
      info.shape.assign(dims.begin(), dims.end());
      info.begin = offsets[0], info.end = offsets[1];
      size_t numel = 0;
      if (std::find(dims.begin(), dims.end(), size_t{0}) == dims.end()) {
        numel = 1;
        for (size_t d : dims) {  // more elements than bytes cannot fit, and would overflow
          if (numel > data_size / d) {
            return bad_file(path, name + ": shape " + shape_string(info.shape) + " exceeds the data");
          }
          numel *= d;
        }
      }
      if (info.end < info.begin || info.end > data_size ||
          info.end - info.begin != numel * element) {
        return bad_file(path, name + ": data_offsets do not match shape " +
                                  shape_string(info.shape) + " and the file size");
      }
      (*tensors)[name] = std::move(info);
    } catch (const json::exception& e) {
      return bad_file(path, name + ": " + e.what());
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening " + path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return errno_error("stat " + path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return bad_file(path, "shorter than its 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return errno_error("mmap " + path);
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_ = static_cast<const char*>(map);
  file->map_size_ = size;
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->map_, 8);  // little-endian host assumed (x86, arm)
  if (header_len > size - 8) return bad_file(path, "header length exceeds the file");
  file->data_ = file->map_ + 8 + header_len;
  COHORT_RETURN_IF_ERROR(parse_header(path, std::string(file->map_ + 8, header_len),
                                      size - 8 - header_len, &file->tensors_, &file->metadata_));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<char*>(map_), map_size_);
}

const SafetensorsInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<const SafetensorsInfo*> SafetensorsFile::lookup(const std::string& name) const {
  const SafetensorsInfo* info = find(name);
  if (!info) return not_found("safetensors " + path_ + ": no tensor named " + name);
  if (!info->supported || info->dtype == DType::kI32) {
    return invalid_argument("safetensors " + path_ + ": " + name + " has dtype " +
                            (info->supported ? std::string("I32") : info->dtype_name) +
                            "; cohort reads F32, BF16 and F16 tensors");
  }
  return info;
}

Result<std::string_view> SafetensorsFile::raw_bytes(const std::string& name) const {
  const SafetensorsInfo* info = find(name);
  if (!info) return not_found("safetensors " + path_ + ": no tensor named " + name);
  return std::string_view(data_ + info->begin, info->end - info->begin);
}

Status SafetensorsFile::read_f32(const std::string& name, float* out) const {
  COHORT_ASSIGN_OR_RETURN(const SafetensorsInfo* info, lookup(name));
  convert_to_f32(out, data_ + info->begin, info->dtype,
                 (info->end - info->begin) / dtype_size(info->dtype));
  return Status::ok();
}

Status SafetensorsFile::read_rows_f32(const std::string& name, int64_t begin, int64_t end,
                                      float* out) const {
  COHORT_ASSIGN_OR_RETURN(const SafetensorsInfo* info, lookup(name));
  if (info->shape.empty() || begin < 0 || begin > end || end > info->shape[0]) {
    return invalid_argument("safetensors " + path_ + ": rows [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside " + name + " " +
                            shape_string(info->shape));
  }
  const size_t row =
      (info->end - info->begin) / dtype_size(info->dtype) / static_cast<size_t>(info->shape[0]);
  const size_t es = dtype_size(info->dtype);
  convert_to_f32(out, data_ + info->begin + begin * row * es, info->dtype, (end - begin) * row);
  return Status::ok();
}

Status SafetensorsFile::read_cols_f32(const std::string& name, int64_t begin, int64_t end,
                                      float* out) const {
  COHORT_ASSIGN_OR_RETURN(const SafetensorsInfo* info, lookup(name));
  if (info->shape.size() != 2 || begin < 0 || begin > end || end > info->shape[1]) {
    return invalid_argument("safetensors " + path_ + ": columns [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside " + name + " " +
                            shape_string(info->shape));
  }
  const size_t es = dtype_size(info->dtype), cols = info->shape[1], width = end - begin;
  for (int64_t r = 0; r < info->shape[0]; ++r) {
    convert_to_f32(out + r * width, data_ + info->begin + (r * cols + begin) * es, info->dtype,
                   width);
  }
  return Status::ok();
}

Status SafetensorsFile::read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                                       int64_t col_begin, int64_t col_end, float* out) const {
  COHORT_ASSIGN_OR_RETURN(const SafetensorsInfo* info, lookup(name));
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < info->shape.size(); ++d) rows *= info->shape[d];
  const int64_t cols = info->shape.empty() ? 0 : info->shape.back();
  if (info->shape.size() < 2 || row_begin < 0 || row_begin > row_end || row_end > rows || col_begin < 0 ||
      col_begin > col_end || col_end > cols) {
    return invalid_argument("safetensors " + path_ + ": rows [" + std::to_string(row_begin) + ", " +
                            std::to_string(row_end) + ") and columns [" + std::to_string(col_begin) + ", " +
                            std::to_string(col_end) + ") outside " + name + " " + shape_string(info->shape));
  }
  const size_t es = dtype_size(info->dtype), width = col_end - col_begin;
  for (int64_t r = row_begin; r < row_end; ++r) {
    convert_to_f32(out + (r - row_begin) * width, data_ + info->begin + (r * cols + col_begin) * es, info->dtype,
                   width);
  }
  return Status::ok();
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    std::ifstream in(index);
    try {
      const json j = json::parse(in);
      for (auto& [name, file] : j.at("weight_map").items()) {
        ckpt.file_of_[name] = file.get<std::string>();
      }
    } catch (const json::exception& e) {
      return invalid_argument(index.string() + ": " + e.what());
    }
  } else if (fs::exists(single)) {
    COHORT_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single.string()));
    for (const auto& [name, info] : file->tensors()) ckpt.file_of_[name] = "model.safetensors";
    ckpt.files_["model.safetensors"] = std::move(file);
  } else {
    return not_found("model folder " + dir +
                     " has neither model.safetensors nor model.safetensors.index.json");
  }
  for (const auto& [name, file_name] : ckpt.file_of_) {
    if (ckpt.files_.count(file_name)) continue;
    COHORT_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open((fs::path(dir) / file_name).string()));
    ckpt.files_[file_name] = std::move(file);
  }
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

Result<const SafetensorsFile*> SafetensorsCheckpoint::file(const std::string& name) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) return not_found("model folder " + dir_ + ": no tensor " + name);
  const SafetensorsFile* f = files_.at(it->second).get();
  if (!f->find(name)) {
    return not_found("model folder " + dir_ + ": index names " + it->second + " for " + name +
                     " but the file lacks it");
  }
  return f;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    const size_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return errno_error("creating " + path);
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<char> buffer;
  for (const TensorToWrite& t : tensors) {
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    buffer.resize(numel * dtype_size(t.dtype));
    convert_from_f32(buffer.data(), t.dtype, t.data, numel);
    out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  }
  out.flush();
  if (!out) return errno_error("writing " + path);
  return Status::ok();
}

Status write_safetensors_folder(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                size_t max_shard_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("creating " + dir + ": " + ec.message());
  std::vector<std::vector<TensorToWrite>> shards(1);
  size_t shard_bytes = 0, total = 0;
  for (const TensorToWrite& t : tensors) {
    size_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<size_t>(d);
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    return write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                             {{"format", "pt"}});
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    COHORT_RETURN_IF_ERROR(
        write_safetensors((fs::path(dir) / name).string(), shards[i], {{"format", "pt"}}));
    for (const TensorToWrite& t : shards[i]) weight_map[t.name] = name;
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(fs::path(dir) / "model.safetensors.index.json", std::ios::trunc);
  out << index.dump(2) << "\n";
  if (!out) return errno_error("writing the index in " + dir);
  return Status::ok();
}

}  // namespace cohort::hf
