#include "parallel/checkpoint_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cohort::parallel {
namespace fs = std::filesystem;
using nlohmann::json;

Status write_piece_list(const std::string& path, const std::vector<Piece>& pieces) {
  json list = json::array();
  for (const auto& p : pieces)
    list.push_back({{"param", p.param}, {"tensor", int(p.tensor)}, {"file", p.file},
                    {"file_offset", p.file_offset}, {"count", p.count}, {"local_begin", p.local_begin},
                    {"shard_dim", int(p.shard_dim)}, {"shard_begin", p.shard_begin},
                    {"local_shape", p.local_shape}});
  std::ofstream out(path);
  out << json{{"pieces", list}}.dump() << "\n";
  out.close();
  if (!out) return errno_error("writing " + path);
  return Status::ok();
}

namespace {

// The integers of a piece list as write_piece_list writes them. A number
// written as a float would convert with undefined behaviour once beyond
// the type's range (the fuzzer sent "file_offset": 4.4e128), so only
// integers are read.
const json& integer(const json& value, const char* key) {
  if (!value.is_number_integer()) throw std::invalid_argument(std::string(key) + " is not an integer");
  return value;
}
template <typename T>
T integer_at(const json& piece, const char* key) {
  return integer(piece.at(key), key).get<T>();
}
std::vector<int64_t> integers_at(const json& piece, const char* key) {
  const json& list = piece.at(key);
  if (!list.is_array()) throw std::invalid_argument(std::string(key) + " is not a list");
  std::vector<int64_t> out;
  for (const auto& v : list) out.push_back(integer(v, key).get<int64_t>());
  return out;
}

}  // namespace

Result<PieceIndex> read_piece_index(const std::string& checkpoint_dir) {
  PieceIndex index;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    json doc;
    try {
      doc = json::parse(in);
      for (const auto& p : doc.at("pieces")) {
        Piece piece;
        piece.param = p.at("param").get<std::string>();
        piece.tensor = PieceTensor(integer_at<int>(p, "tensor"));
        piece.file = p.at("file").get<std::string>();
        piece.file_offset = integer_at<uint64_t>(p, "file_offset");
        piece.count = integer_at<uint64_t>(p, "count");
        piece.local_begin = integer_at<uint64_t>(p, "local_begin");
        piece.shard_dim = models::ShardDim(integer_at<int>(p, "shard_dim"));
        piece.shard_begin = integer_at<int64_t>(p, "shard_begin");
        piece.local_shape = integers_at(p, "local_shape");
        index[piece.param].push_back(std::move(piece));
      }
    } catch (const std::exception& e) {  // json's errors and integer()'s
      return invalid_argument(entry.path().string() + ": not a checkpoint piece list (" + e.what() + ")");
    }
  }
  if (ec) return io_error("cannot read checkpoint folder " + checkpoint_dir + ": " + ec.message());
  if (index.empty()) return not_found("checkpoint folder " + checkpoint_dir + " holds no rank-*.json piece lists");
  return index;
}

namespace {
size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  return n;
}
}  // namespace

Result<std::vector<float>> assemble_global(const std::string& checkpoint_dir, const PieceIndex& index,
                                           const std::string& param, PieceTensor tensor,
                                           const std::vector<int64_t>& global_shape,
                                           std::vector<char>* covered_out) {
  auto it = index.find(param);
  if (it == index.end()) return not_found("checkpoint " + checkpoint_dir + " has no parameter " + param);
  size_t total = numel_of(global_shape);
  size_t global_cols = global_shape.size() > 1 ? size_t(global_shape[1]) : 1;
  std::vector<float> global(total, 0.0f);
  std::vector<char> covered(total, 0);
  std::map<std::string, std::ifstream> files;
  std::vector<float> buffer;
  for (const auto& piece : it->second) {
    if (piece.tensor != tensor) continue;
    auto& file = files[piece.file];
    if (!file.is_open()) file.open(fs::path(checkpoint_dir) / piece.file, std::ios::binary);
    buffer.resize(piece.count);
    file.seekg(std::streamoff(piece.file_offset));
    file.read(reinterpret_cast<char*>(buffer.data()), std::streamsize(piece.count * sizeof(float)));
    if (!file) return io_error(checkpoint_dir + "/" + piece.file + ": short read for " + param);
    size_t local_cols = piece.local_shape.size() > 1 ? size_t(piece.local_shape[1]) : 1;
    for (size_t i = 0; i < piece.count; ++i) {
      size_t local = piece.local_begin + i;
      size_t row = local / local_cols, col = local % local_cols;
      if (piece.shard_dim == models::ShardDim::kRows) row += size_t(piece.shard_begin);
      if (piece.shard_dim == models::ShardDim::kCols) col += size_t(piece.shard_begin);
      size_t g = row * global_cols + col;
      if (g >= total) return invalid_argument(checkpoint_dir + ": a piece of " + param + " lies outside its shape");
      global[g] = buffer[i];
      covered[g] = 1;
    }
  }
  if (covered_out) {
    *covered_out = std::move(covered);
    return global;
  }
  for (size_t g = 0; g < total; ++g)
    if (!covered[g])
      return invalid_argument("checkpoint " + checkpoint_dir + " does not cover all of " + param +
                              " (element " + std::to_string(g) + " missing: is a rank file absent?)");
  return global;
}

void slice_local(const std::vector<float>& global, const models::ParamSpec& spec, float* local) {
  size_t global_cols = spec.global_shape.size() > 1 ? size_t(spec.global_shape[1]) : 1;
  size_t local_cols = spec.shape.size() > 1 ? size_t(spec.shape[1]) : 1;
  size_t rows = spec.numel / local_cols;
  for (size_t r = 0; r < rows; ++r) {
    size_t gr = r + (spec.shard_dim == models::ShardDim::kRows ? size_t(spec.shard_begin) : 0);
    size_t gc = spec.shard_dim == models::ShardDim::kCols ? size_t(spec.shard_begin) : 0;
    std::copy_n(global.data() + gr * global_cols + gc, local_cols, local + r * local_cols);
  }
}

}  // namespace cohort::parallel
