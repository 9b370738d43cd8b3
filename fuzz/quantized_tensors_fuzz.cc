// libFuzzer: a safetensors file read as a quantized checkpoint
// (hf/quantized_tensors.h). Every P.weight / P.qweight in it is read as FP8
// (block and per-tensor/channel scales), GPTQ (4 and 8 bits, act-order, both
// zero conventions) and AWQ, at the shape its own tensor implies, and what
// validates is dequantized: whatever the shapes, dtypes and bytes, an error
// naming the tensor or values, never a crash or a read out of bounds. The
// input is written as model.safetensors of a folder in /dev/shm.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "hf/quantized_tensors.h"

namespace {

using cohort::hf::QuantizationConfig;
using cohort::hf::QuantMethod;

std::vector<QuantizationConfig> configs() {
  std::vector<QuantizationConfig> all;
  QuantizationConfig fp8;
  fp8.method = QuantMethod::kFp8, fp8.bits = 8, fp8.weight_block_size = {128, 128};
  all.push_back(fp8);
  fp8.weight_block_size = {0, 0};
  all.push_back(fp8);
  for (int bits : {4, 8}) {
    QuantizationConfig gptq;
    gptq.method = QuantMethod::kGptq, gptq.bits = bits, gptq.group_size = 32,
    gptq.desc_act = bits == 4;
    gptq.gptq_zeros = bits == 4 ? cohort::models::quant::GptqZeros::kStoredMinusOne
                                : cohort::models::quant::GptqZeros::kStored;
    all.push_back(gptq);
  }
  QuantizationConfig awq;
  awq.method = QuantMethod::kAwq, awq.bits = 4, awq.group_size = 32;
  all.push_back(awq);
  return all;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = "/dev/shm/cohort-fuzz-quantized-" + std::to_string(::getpid());
  static const std::vector<QuantizationConfig> all = configs();
  std::filesystem::create_directories(dir);
  FILE* f = std::fopen((dir + "/model.safetensors").c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto checkpoint = cohort::hf::SafetensorsCheckpoint::open(dir);
  if (!checkpoint) return 0;
  for (const std::string& name : checkpoint->names()) {
    const bool fp8 = ends_with(name, ".weight"), packed = ends_with(name, ".qweight");
    if (!fp8 && !packed) continue;
    const std::string weight = packed ? name.substr(0, name.size() - 8) + ".weight" : name;
    auto file = checkpoint->file(name);
    if (!file) continue;
    const auto& shape = (*file)->find(name)->shape;
    if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0 || shape[0] > 4096 || shape[1] > 4096)
      continue;
    for (const QuantizationConfig& config : all) {
      // The [out, in] each packing implies for the stored tensor's shape.
      std::vector<int64_t> implied = shape;
      if (packed && config.method == QuantMethod::kGptq)
        implied = {shape[1], shape[0] * (32 / config.bits)};
      if (packed && config.method == QuantMethod::kAwq) implied = {shape[1] * 8, shape[0]};
      auto q = cohort::hf::read_quantized_weight(*checkpoint, config, weight, implied);
      (void)cohort::hf::stored_weight_format(*checkpoint, config, weight);
      if (!q || !*q) continue;
      std::vector<float> row(size_t((*q)->cols));
      (void)cohort::models::quant::dequantize_rows(**q, 0, 1, row.data());
      (void)cohort::models::quant::dequantize_rows(**q, (*q)->rows - 1, (*q)->rows, row.data());
    }
  }
  return 0;
}
