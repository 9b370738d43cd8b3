// models_hf_dump: loads a Hugging Face model folder into cohort and writes
// what tests/models/hf_parity.py compares against transformers:
//   models_hf_dump <hf_dir> <comma-separated token ids> <max_new_tokens>
//                  <logits.f32 out> [cpu|cuda]
// The logits file holds [T, vocab] float32 of the full forward pass over the
// prompt; stdout gets {"greedy": [...]} from KV-cache greedy decoding.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "models/cuda_backend.h"
#include "infer/generate.h"
#include "hf/weights.h"
#include "hf/config_json.h"

using namespace cohort::models;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s hf_dir tokens max_new logits_out [cpu|cuda]\n", argv[0]);
    return 2;
  }
  std::vector<int32_t> tokens;
  std::stringstream ss(argv[2]);
  for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::stoi(t));
  const int max_new = std::stoi(argv[3]);
  std::unique_ptr<Backend> backend = make_cpu_backend();
#ifdef COHORT_HAVE_CUDA
  if (argc > 5 && std::string(argv[5]) == "cuda") {
    auto cuda = make_cuda_backend(0);
    if (!cuda.is_ok()) {
      std::fprintf(stderr, "%s\n", cuda.status().to_string().c_str());
      return 1;
    }
    backend = std::move(cuda).value();
  }
#endif
  auto model = cohort::hf::load_model(argv[1], {}, backend.get());
  if (!model.is_ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  Model& m = **model;
  const int T = static_cast<int>(tokens.size()), V = m.config().vocab_size;
  m.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> logits(static_cast<size_t>(T) * V);
  backend->copy_to_host(logits.data(), m.logits(), logits.size() * sizeof(float));
  std::ofstream(argv[4], std::ios::binary)
      .write(reinterpret_cast<const char*>(logits.data()),
             static_cast<std::streamsize>(logits.size() * sizeof(float)));
  auto engine = cohort::models::decode::ModelEngine::borrow(m, 1, std::min(m.config().max_seq, T + max_new + 1));
  if (!engine.is_ok()) {
    std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
    return 1;
  }
  cohort::infer::GenerateOptions opt;
  opt.max_new_tokens = max_new;
  auto none = cohort::infer::StopCondition::create({}, nullptr);
  auto out = cohort::infer::generate_all(**engine, {cohort::infer::Prompt{0, tokens, ""}}, *none, opt, nullptr);
  if (!out.is_ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  std::printf("{\"greedy\": [");
  for (size_t i = 0; i < (*out)[0].tokens.size(); ++i) {
    std::printf("%s%d", i ? ", " : "", (*out)[0].tokens[i]);
  }
  std::printf("]}\n");
  return 0;
}
