// data_tokenize_dump: cohort's tokenizer and chat-template renderer on
// stdin lines, for tests/data/tokenizer_parity.py to compare with Hugging
// Face's `tokenizers` and `apply_chat_template`.
//
//   data_tokenize_dump encode HF_DIR < {"text": ...} lines
//       -> {"ids": [...], "ids_special": [...], "decoded": "..."} lines
//   data_tokenize_dump chat TEMPLATE.jinja < context lines ({"messages": ...})
//       -> {"text": "..."} or {"error": "..."} lines
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "hf/model_folder.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace {

int encode(const std::string& dir) {
  auto folder = cohort::hf::ModelFolder::open(dir);
  auto tokenizer = folder ? folder->open_tokenizer() : decltype(folder->open_tokenizer())(folder.status());
  if (!tokenizer) {
    std::fprintf(stderr, "%s\n", tokenizer.status().message().c_str());
    return 1;
  }
  for (std::string line; std::getline(std::cin, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text").get<std::string>();
    const auto ids = (*tokenizer)->encode(text);
    nlohmann::json out = {{"ids", ids},
                          {"ids_special", (*tokenizer)->encode_with_special_tokens(text)},
                          {"decoded", (*tokenizer)->decode(ids)}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

int chat(const std::string& path) {
  std::ifstream in(path);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto parsed = cohort::text::ChatTemplate::parse(source);
  if (!parsed) {
    std::fprintf(stderr, "%s\n", parsed.status().message().c_str());
    return 1;
  }
  for (std::string line; std::getline(std::cin, line);) {
    const auto context = nlohmann::ordered_json::parse(line);
    auto rendered = parsed->render(context);
    nlohmann::json out = rendered ? nlohmann::json{{"text", rendered->text}}
                                  : nlohmann::json{{"error", rendered.status().message()}};
    std::cout << out.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "encode") return encode(argv[2]);
  if (argc == 3 && std::string(argv[1]) == "chat") return chat(argv[2]);
  std::fprintf(stderr, "usage: data_tokenize_dump encode HF_DIR | chat TEMPLATE.jinja (lines on stdin)\n");
  return 2;
}
