// Token streams and the world-size-independent sampler.
#include "data/token_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace cohort::data {
namespace {

namespace fs = std::filesystem;

Status append_file_bytes(const fs::path& path, std::vector<int32_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_error("opening " + path.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char b : bytes) out->push_back(static_cast<unsigned char>(b));
  return Status::ok();
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Result<std::vector<int32_t>> read_text_bytes(const std::string& path) {
  std::vector<int32_t> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    if (ec) return io_error("listing " + path + ": " + ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) COHORT_RETURN_IF_ERROR(append_file_bytes(f, &out));
  } else {
    COHORT_RETURN_IF_ERROR(append_file_bytes(path, &out));
  }
  if (out.empty()) return invalid_argument("no text in " + path);
  return out;
}

Result<std::vector<int32_t>> read_token_file(const std::string& path, TokenFormat format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_error("opening " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t width = format == TokenFormat::kUint16 ? 2 : 4;
  if (bytes.size() % width != 0) {
    return invalid_argument(path + ": size " + std::to_string(bytes.size()) +
                            " is not a multiple of the token width " + std::to_string(width));
  }
  std::vector<int32_t> out(bytes.size() / width);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v = 0;
    for (size_t k = 0; k < width; ++k) v |= static_cast<uint32_t>(b[i * width + k]) << (8 * k);
    if (v > 0x7fffffffu)
      return invalid_argument(path + ": token " + std::to_string(v) + " too large");
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

Status write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                        TokenFormat format) {
  const size_t width = format == TokenFormat::kUint16 ? 2 : 4;
  std::vector<unsigned char> bytes(tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(tokens[i]);
    if (tokens[i] < 0 || (width == 2 && v > 0xffff)) {
      return invalid_argument("token " + std::to_string(tokens[i]) + " does not fit " +
                              (width == 2 ? "uint16" : "uint32") + " writing " + path);
    }
    for (size_t k = 0; k < width; ++k) bytes[i * width + k] = (v >> (8 * k)) & 0xff;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) return errno_error("writing " + path);
  return Status::ok();
}

TokenSplit split_held_out(const std::vector<int32_t>& tokens, double fraction) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const size_t held = static_cast<size_t>(static_cast<double>(tokens.size()) * fraction);
  const size_t cut = tokens.size() - held;
  return TokenSplit{std::vector<int32_t>(tokens.begin(), tokens.begin() + cut),
                    std::vector<int32_t>(tokens.begin() + cut, tokens.end())};
}

std::string SamplerState::to_json() const {
  return nlohmann::json{{"seed", seed}, {"step", step}}.dump();
}

Result<SamplerState> SamplerState::from_json(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    return SamplerState{j.at("seed").get<uint64_t>(), j.at("step").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("sampler state: ") + e.what());
  }
}

Result<BatchSampler> BatchSampler::create(const std::vector<int32_t>* tokens,
                                          const SamplerOptions& options) {
  if (options.seq_len < 1 || options.global_batch < 1) {
    return invalid_argument("sampler: seq_len and global_batch must be >= 1");
  }
  if (tokens->size() < static_cast<size_t>(options.seq_len) + 1) {
    return invalid_argument(
        "sampler: " + std::to_string(tokens->size()) +
        " tokens are fewer than seq_len + 1 = " + std::to_string(options.seq_len + 1));
  }
  return BatchSampler(tokens, options);
}

BatchSampler::BatchSampler(const std::vector<int32_t>* tokens, const SamplerOptions& options)
    : tokens_(tokens), options_(options) {
  windows_ = static_cast<int64_t>((tokens_->size() - 1) / options_.seq_len);
}

int64_t BatchSampler::window_of(int64_t sequence) {
  const int64_t epoch = sequence / windows_, index = sequence % windows_;
  if (!options_.shuffle) return index;
  if (epoch != cached_epoch_) {
    // Fisher-Yates with our own generator: std::shuffle's algorithm is
    // implementation-defined, and the order must be the same everywhere.
    permutation_.resize(windows_);
    for (int64_t i = 0; i < windows_; ++i) permutation_[i] = i;
    uint64_t state = options_.seed * 0x100000001b3ull + static_cast<uint64_t>(epoch);
    for (int64_t i = windows_ - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
      std::swap(permutation_[i], permutation_[j]);
    }
    cached_epoch_ = epoch;
  }
  return permutation_[index];
}

void BatchSampler::fill(int64_t step, int64_t first, int64_t count, int32_t* inputs,
                        int32_t* targets) {
  const int T = options_.seq_len;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t window = window_of(step * options_.global_batch + first + s);
    const int32_t* src = tokens_->data() + window * T;
    std::copy(src, src + T, inputs + s * T);
    std::copy(src + 1, src + T + 1, targets + s * T);
  }
}

Status BatchSampler::fill_rank(int64_t step, int rank, int world, int32_t* inputs,
                               int32_t* targets) {
  if (world < 1 || rank < 0 || rank >= world || options_.global_batch % world != 0) {
    return invalid_argument("sampler: global_batch " + std::to_string(options_.global_batch) +
                            " does not split over " + std::to_string(world) +
                            " data-parallel ranks (rank " + std::to_string(rank) + ")");
  }
  const int64_t local = options_.global_batch / world;
  fill(step, rank * local, local, inputs, targets);
  return Status::ok();
}

Status BatchSampler::restore(const SamplerState& state) {
  if (state.seed != options_.seed) {
    return failed_precondition("sampler state was saved with seed " + std::to_string(state.seed) +
                               ", this sampler uses " + std::to_string(options_.seed));
  }
  step_ = state.step;
  return Status::ok();
}

}  // namespace cohort::data
