// Writes tiny Hugging Face folders whose linear projections are stored as a
// quantized checkpoint stores them (FP8, GPTQ, AWQ tensor sets, packed by the
// tests' own packers in tests/models/quant/reference_packers.h), with a
// safetensors writer of its own for the I32 / F8_E4M3 / F16 tensors. Each
// folder comes with the model its definition implies: the reference model
// with every quantized projection replaced by its dequantized matrix.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/config_json.h"
#include "models/model.h"
#include "tests/models/quant/reference_packers.h"

namespace cohort::hf::testing {

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline RawTensor float_tensor(const std::string& name, std::vector<int64_t> shape,
                              const float* data, size_t n, bool as_f16 = false) {
  RawTensor t{name, as_f16 ? "F16" : "F32", std::move(shape), {}};
  for (size_t i = 0; i < n; ++i) {
    if (as_f16) {
      const uint16_t h = float_to_f16_bits(data[i]);
      t.bytes.push_back(uint8_t(h)), t.bytes.push_back(uint8_t(h >> 8));
    } else {
      uint8_t b[4];
      std::memcpy(b, &data[i], 4);
      t.bytes.insert(t.bytes.end(), b, b + 4);
    }
  }
  return t;
}

inline RawTensor byte_tensor(const std::string& name, const std::string& dtype,
                             std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return RawTensor{name, dtype, std::move(shape), std::move(bytes)};
}

// safetensors: 8-byte little-endian header length, the JSON header, the data.
inline void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  const std::string text = header.dump();
  const uint64_t length = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text;
  for (const RawTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
}

// Writes the quantized set for one projection P.weight [out, in] into
// `tensors` and returns its dequantized matrix [out, in]; null return: store
// the weight unquantized.
using ProjectionStore =
    std::function<std::vector<float>(const std::string& prefix, int64_t out, int64_t in,
                                     uint64_t seed, std::vector<RawTensor>* tensors)>;

inline bool is_projection(const std::string& name) {
  for (const char* p :
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.find(std::string(".") + p + ".weight") != std::string::npos) return true;
  return false;
}

// `reference`'s parameters into `dir` (config.json with `quantization`
// added), projections through `store`; `reference` becomes the expected
// model (its projections replaced by the dequantized matrices).
inline void write_quantized_folder(const std::string& dir, models::Model& reference,
                                   const nlohmann::json& quantization,
                                   const ProjectionStore& store) {
  std::vector<RawTensor> tensors;
  uint64_t seed = 100;
  for (int g = 0; g < reference.num_groups(); ++g) {
    for (const models::ParamSpec& p : reference.layout().groups[g].params) {
      float* values = reference.params(g) + p.offset;
      if (is_projection(p.name)) {
        const std::string prefix = p.name.substr(0, p.name.size() - std::string(".weight").size());
        const std::vector<float> dequantized =
            store(prefix, p.shape[0], p.shape[1], seed++, &tensors);
        if (!dequantized.empty()) {
          std::memcpy(values, dequantized.data(), dequantized.size() * sizeof(float));
          continue;
        }
      }
      tensors.push_back(float_tensor(p.name, p.shape, values, p.numel));
    }
  }
  std::filesystem::create_directories(dir);
  write_raw_safetensors(dir + "/model.safetensors", tensors);
  nlohmann::json config =
      nlohmann::json::parse(config_json_text(reference.config(), models::DType::kF32));
  config["quantization_config"] = quantization;
  std::ofstream(dir + "/config.json") << config.dump(2);
}

namespace mq = models::quant::testing;

// GPTQ int4, group `group`, act-order or not, "gptq" (v1) zero points.
inline ProjectionStore gptq_store(int64_t group, bool act_order, int bits = 4) {
  return [=](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
             std::vector<RawTensor>* tensors) {
    const mq::IntegerWeight w = mq::random_integer_weight(out, in, group, bits, 1, act_order, seed);
    const mq::PackedTensors t = mq::pack_gptq_reference(w, bits, /*stores_zero_minus_one=*/true);
    const int64_t per = 32 / bits, groups = (in + group - 1) / group;
    tensors->push_back(byte_tensor(prefix + ".qweight", "I32", {in / per, out}, t.qweight));
    tensors->push_back(byte_tensor(prefix + ".qzeros", "I32", {groups, out / per}, t.qzeros));
    tensors->push_back(
        float_tensor(prefix + ".scales", {groups, out}, t.scales.data(), t.scales.size(), true));
    std::vector<uint8_t> g_idx(t.g_idx.size() * 4);
    std::memcpy(g_idx.data(), t.g_idx.data(), g_idx.size());
    tensors->push_back(byte_tensor(prefix + ".g_idx", "I32", {in}, g_idx));
    return mq::integer_weight_matrix(w, true);
  };
}

inline ProjectionStore awq_store(int64_t group) {
  return [=](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
             std::vector<RawTensor>* tensors) {
    const mq::IntegerWeight w = mq::random_integer_weight(out, in, group, 4, 0, false, seed);
    const mq::PackedTensors t = mq::pack_awq_reference(w);
    tensors->push_back(byte_tensor(prefix + ".qweight", "I32", {in, out / 8}, t.qweight));
    tensors->push_back(byte_tensor(prefix + ".qzeros", "I32", {in / group, out / 8}, t.qzeros));
    tensors->push_back(float_tensor(prefix + ".scales", {in / group, out}, t.scales.data(),
                                    t.scales.size(), true));
    return mq::integer_weight_matrix(w, false);
  };
}

enum class Fp8Scales { kBlock128, kChannel, kTensor };

// Random finite e4m3 bytes and fp32 scales of the granularity asked.
inline ProjectionStore fp8_store(Fp8Scales kind) {
  return [=](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
             std::vector<RawTensor>* tensors) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> bytes(static_cast<size_t>(out * in));
    for (uint8_t& b : bytes) do
        b = uint8_t(rng());
      while ((b & 0x7f) == 0x7f);
    const int64_t tile_rows = (out + 127) / 128, tile_cols = (in + 127) / 128;
    std::vector<int64_t> scale_shape = kind == Fp8Scales::kBlock128
                                           ? std::vector<int64_t>{tile_rows, tile_cols}
                                       : kind == Fp8Scales::kChannel ? std::vector<int64_t>{out, 1}
                                                                     : std::vector<int64_t>{};
    size_t count = 1;
    for (int64_t d : scale_shape) count *= size_t(d);
    std::uniform_real_distribution<float> s(2e-5f, 2e-4f);
    std::vector<float> scales(count);
    for (float& v : scales) v = s(rng);
    std::vector<float> w(bytes.size());
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const float scale = kind == Fp8Scales::kBlock128
                                ? scales[size_t((r / 128) * tile_cols + c / 128)]
                            : kind == Fp8Scales::kChannel ? scales[size_t(r)]
                                                          : scales[0];
        w[size_t(r * in + c)] = float(mq::e4m3_reference(bytes[size_t(r * in + c)])) * scale;
      }
    tensors->push_back(byte_tensor(prefix + ".weight", "F8_E4M3", {out, in}, bytes));
    const std::string scale_name =
        kind == Fp8Scales::kBlock128 ? ".weight_scale_inv" : ".weight_scale";
    tensors->push_back(
        float_tensor(prefix + scale_name, scale_shape, scales.data(), scales.size()));
    return w;
  };
}

}  // namespace cohort::hf::testing
