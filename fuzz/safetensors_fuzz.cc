// libFuzzer: a safetensors file (8-byte header length, JSON header, data)
// opened and every tensor read, as a worker loads a Hugging Face folder
// (hf/safetensors.h). The input is written to a file in /dev/shm.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/cohort-fuzz-safetensors-" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = cohort::hf::SafetensorsFile::open(path);
  if (!file) return 0;
  for (const auto& [name, info] : (*file)->tensors()) {
    int64_t numel = 1;
    for (int64_t d : info.shape) {
      if (d <= 0 || numel > (int64_t(1) << 22) / (d > 0 ? d : 1)) {
        numel = -1;
        break;
      }
      numel *= d;
    }
    if (numel < 0 || numel > (int64_t(1) << 22)) continue;  // keep each run small
    std::vector<float> out(size_t(numel) + 1);
    (void)(*file)->read_f32(name, out.data());
    if (!info.shape.empty() && info.shape[0] > 0) {
      (void)(*file)->read_rows_f32(name, 0, 1, out.data());
    }
    if (info.shape.size() == 2 && info.shape[1] > 0) {
      (void)(*file)->read_cols_f32(name, 0, 1, out.data());
    }
  }
  return 0;
}
