// quant_bench: the host side of `[model] quantize` and QLoRA's base, ms per
// projection of the Llama-3.1-8B shape (4096 x 4096, 1024 x 4096 and
// 14336 x 4096 and 4096 x 14336): quantize, dequantize to fp32 and pack into
// the GPU's row layout, once per format, on one thread.
//
//   quant_bench [formats]      formats: int4,int8,fp8-block,nf4 (default all)
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/quant/quantized_weight.h"
#include "models/quant/row_packed.h"

namespace {

namespace quant = cohort::models::quant;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string list = argc > 1 ? argv[1] : "int4,int8,fp8-block,nf4";
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"q_proj", 4096, 4096}, {"k_proj", 1024, 4096}, {"gate_proj", 14336, 4096},
                          {"down_proj", 4096, 14336}};
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::printf("| format | projection | quantize ms | dequantize ms | pack ms |\n|---|---|---|---|---|\n");
  std::stringstream formats(list);
  for (std::string name; std::getline(formats, name, ',');) {
    quant::WeightFormat format;
    if (name == "int4") format = quant::WeightFormat::kInt4;
    else if (name == "int8") format = quant::WeightFormat::kInt8;
    else if (name == "fp8-block") format = quant::WeightFormat::kFp8Block;
    else if (name == "nf4") format = quant::WeightFormat::kNf4;
    else {
      std::fprintf(stderr, "quant_bench: unknown format %s (int4, int8, fp8-block, nf4)\n", name.c_str());
      return 2;
    }
    for (const Shape& s : shapes) {
      std::vector<float> w(static_cast<size_t>(s.rows * s.cols));
      for (float& v : w) v = dist(rng);
      auto t0 = Clock::now();
      auto q = quant::quantize(format, s.name, w.data(), s.rows, s.cols);
      const double quantize_ms = ms_since(t0);
      if (!q.is_ok()) {
        std::fprintf(stderr, "quant_bench: %s\n", q.status().to_string().c_str());
        return 1;
      }
      t0 = Clock::now();
      const auto back = quant::dequantize(*q, w.data());
      const double dequantize_ms = ms_since(t0);
      t0 = Clock::now();
      auto packed = quant::pack_rows(*q);
      const double pack_ms = ms_since(t0);
      if (!back.is_ok() || !packed.is_ok()) {
        std::fprintf(stderr, "quant_bench: %s failed\n", s.name);
        return 1;
      }
      std::printf("| %s | %s [%lld, %lld] | %.1f | %.1f | %.1f |\n", name.c_str(), s.name,
                  static_cast<long long>(s.rows), static_cast<long long>(s.cols), quantize_ms, dequantize_ms,
                  pack_ms);
    }
  }
  return 0;
}
