// Text to tokens with the model's tokenizer: documents end with EOS (BOS
// first where the post-processor adds one), chat masks cover assistant
// turns token by token, prompt/completion masks the prompt, output is the
// same for any thread count, bad lines are reported with their position,
// and the chat templates render as jinja2 renders them.
#include <gtest/gtest.h>

#include "data/text_encoder.h"
#include "data/token_source.h"
#include "data/tokenize.h"
#include "tests/data/data_fixture.h"

namespace cohort::data {
namespace {

using testing::data_scratch;
namespace fs = std::filesystem;
using testing::write_tokenizer_folder;

std::unique_ptr<TextEncoder> encoder(const fs::path& dir) {
  auto e = TextEncoder::open(dir.string(), 0);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(*e);
}

TEST(TextEncoder, DocumentsEndWithEosAndStartWithThePostProcessorsBos) {
  const auto dir = data_scratch("enc");
  write_tokenizer_folder(dir / "qwen");
  write_tokenizer_folder(dir / "llama", /*llama_bos=*/true);
  auto qwen = encoder(dir / "qwen");
  const auto body = qwen->tokenizer().encode("hello world");
  auto doc = qwen->encode_text("hello world");
  EXPECT_EQ(doc.tokens, (std::vector<int32_t>{body[0], body[1], 268}));
  EXPECT_TRUE(doc.mask.empty());
  auto llama = encoder(dir / "llama");
  EXPECT_EQ(llama->encode_text("hello world").tokens, (std::vector<int32_t>{271, body[0], body[1], 268}));
  auto line = qwen->encode_line(R"({"body": "hello world"})", DataFormat::kJsonl, "body");
  ASSERT_TRUE(line.is_ok());
  EXPECT_EQ(line->tokens, doc.tokens);
}

TEST(TextEncoder, TextForAModelWithoutATokenizerSaysWhatToDo) {
  const auto dir = data_scratch("none");
  auto e = TextEncoder::open(dir.string(), 151936);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("cohort tokenize"), std::string::npos) << e.status().message();
  auto bytes = TextEncoder::open("", 256);
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ((*bytes)->encode_text("AB").tokens, (std::vector<int32_t>{65, 66}));  // byte models: no EOS
}

// The trained tokens of a document, decoded, one string per contiguous run.
std::vector<std::string> trained_runs(TextEncoder& e, const EncodedDocument& d) {
  std::vector<std::string> runs;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= d.tokens.size(); ++i) {
    if (i < d.tokens.size() && d.mask[i]) {
      run.push_back(d.tokens[i]);
    } else if (!run.empty()) {
      runs.push_back(e.tokenizer().decode(run));
      run.clear();
    }
  }
  return runs;
}

TEST(TextEncoder, ChatMasksCoverAssistantTurnsTokenByToken) {
  const auto dir = data_scratch("chat");
  write_tokenizer_folder(dir);
  auto e = encoder(dir);
  auto d = e->encode_line(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"}]})",
                          DataFormat::kChat, "text");
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_EQ(d->mask.size(), d->tokens.size());
  // What Qwen3's template renders, cut where the loss starts and stops.
  const std::string prompt = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
  const std::string answer = "<think>\n\n</think>\n\nhello world<|im_end|>";
  std::vector<int32_t> expected = e->tokenizer().encode(prompt);
  const size_t prompt_tokens = expected.size();
  for (int32_t t : e->tokenizer().encode(answer)) expected.push_back(t);
  const size_t answer_end = expected.size();
  for (int32_t t : e->tokenizer().encode("\n")) expected.push_back(t);
  ASSERT_EQ(d->tokens, expected);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(d->mask[i], i >= prompt_tokens && i < answer_end ? 1 : 0) << "token " << i << " '"
                                                                       << e->tokenizer().decode({expected[i]}) << "'";
  // The whole text tokenizes the same as the pieces do.
  EXPECT_EQ(e->tokenizer().encode(prompt + answer + "\n"), expected);
}

TEST(TextEncoder, MultiTurnChatMasksEveryAssistantTurn) {
  const auto dir = data_scratch("multi");
  write_tokenizer_folder(dir);
  auto e = encoder(dir);
  // Qwen3 drops earlier turns' reasoning and adds an empty think block to
  // the last: the spans are found in the whole rendering, not by prefixes.
  auto d = e->encode_line(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "assistant", "content": "<think>plan</think>first"}, {"role": "user", "content": "b"},
      {"role": "assistant", "content": "second"}]})", DataFormat::kChat, "text");
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(trained_runs(*e, *d),
            (std::vector<std::string>{"first<|im_end|>", "<think>\n\n</think>\n\nsecond<|im_end|>"}));
  auto none = e->encode_line(R"({"messages": [{"role": "user", "content": "a"}]})", DataFormat::kChat, "text");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no assistant message"), std::string::npos);
}

TEST(TextEncoder, PromptCompletionTrainsOnTheCompletionAndEos) {
  const auto dir = data_scratch("pc");
  write_tokenizer_folder(dir);
  auto e = encoder(dir);
  auto d = e->encode_line(R"({"prompt": "hello", "completion": " world"})", DataFormat::kPromptCompletion, "text");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(trained_runs(*e, *d), (std::vector<std::string>{" world<|endoftext|>"}));
  EXPECT_EQ(d->mask.front(), 0);
}

std::string shard_bytes(const fs::path& dir) {
  std::string all;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".tokens") all += testing::read_text_file(e.path());
  return all;
}

TEST(Tokenize, OutputIsTheSameForAnyThreadCount) {
  const auto dir = data_scratch("threads");
  write_tokenizer_folder(dir / "model");
  {
    std::ofstream out(dir / "chat.jsonl");
    for (int i = 0; i < 3000; ++i)
      out << R"({"messages": [{"role": "user", "content": "hello )" << i << R"("}, {"role": "assistant", "content": "world )"
          << i * 7 << R"("}]})" << "\n";
  }
  std::ofstream(dir / "doc.txt") << "hello world\n";
  TokenizeOptions o;
  o.inputs = {(dir / "chat.jsonl").string(), (dir / "doc.txt").string()};
  o.model_dir = (dir / "model").string();
  o.shard_tokens = 40000;  // several shards
  o.out_dir = (dir / "one").string();
  o.threads = 1;
  auto one = tokenize_inputs(o);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  o.out_dir = (dir / "three").string();
  o.threads = 3;
  auto three = tokenize_inputs(o);
  ASSERT_TRUE(three.is_ok());
  EXPECT_EQ(one->documents, 3001);
  EXPECT_EQ(one->tokens, three->tokens);
  EXPECT_GT(one->shards.size(), 1u);
  EXPECT_EQ(shard_bytes(dir / "one"), shard_bytes(dir / "three"));
  auto mapped = std::move(open_cohort_shards((dir / "three").string()).value());
  EXPECT_EQ(mapped->size(), three->tokens);
  EXPECT_TRUE(mapped->has_loss_mask());
}

TEST(Tokenize, ValidateOnlyReportsEveryBadLineAndWritesNothing) {
  const auto dir = data_scratch("validate");
  write_tokenizer_folder(dir / "model");
  std::ofstream(dir / "pc.jsonl") << R"({"prompt": "a", "completion": "b"})" << "\n"
                                  << R"({"prompt": "a"})" << "\n"
                                  << "{not json\n"
                                  << R"({"prompt": 1, "completion": "b"})" << "\n";
  TokenizeOptions o;
  o.inputs = {(dir / "pc.jsonl").string()};
  o.model_dir = (dir / "model").string();
  o.validate_only = true;
  auto r = tokenize_inputs(o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::string f = (dir / "pc.jsonl").string();
  EXPECT_EQ(r->errors, (std::vector<std::string>{f + ":2: no \"completion\" field", f + ":3: not valid JSON",
                                                 f + ":4: \"prompt\" is not a string"}));
  EXPECT_EQ(r->bad_lines, 3);
  EXPECT_EQ(r->documents, 1);
  o.validate_only = false;
  o.out_dir = (dir / "out").string();
  auto written = tokenize_inputs(o);
  ASSERT_FALSE(written.is_ok());
  EXPECT_NE(written.status().message().find(f + ":2:"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// What jinja2 3.1 (trim_blocks, lstrip_blocks, as transformers sets it up)
// renders for these templates; tokenizer_parity.py checks the same against
// apply_chat_template on many more conversations.
TEST(ChatTemplate, Qwen3AndLlama3TemplatesRenderAsJinja2Does) {
  auto qwen = text::ChatTemplate::parse(testing::qwen3_template());
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().message();
  auto context = nlohmann::ordered_json::parse(R"({"messages": [{"role": "system", "content": "S"},
      {"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nA",
      "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "b": "é"}}}]},
      {"role": "tool", "content": "R"}], "add_generation_prompt": true})");
  auto r = qwen->render(context);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\n"
            "A\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1, \"b\": \"é\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  auto llama = text::ChatTemplate::parse(testing::read_text_file(fs::path(COHORT_SOURCE_DIR) / "tests/data/templates/llama3.jinja"));
  ASSERT_TRUE(llama.is_ok()) << llama.status().message();
  auto lc = nlohmann::ordered_json::parse(R"({"messages": [{"role": "system", "content": " S "},
      {"role": "user", "content": "Q"}], "bos_token": "<|begin_of_text|>", "date_string": "01 Dec 2026",
      "add_generation_prompt": true})");
  auto lr = llama->render(lc);
  ASSERT_TRUE(lr.is_ok()) << lr.status().message();
  EXPECT_EQ(lr->text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 01 Dec 2026\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto raised = text::ChatTemplate::parse("{{ raise_exception('no system role') }}");
  ASSERT_TRUE(raised.is_ok());
  auto err = raised->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(err.is_ok());
  EXPECT_NE(err.status().message().find("no system role"), std::string::npos);
  auto unsupported = text::ChatTemplate::parse("line one\n{% include 'x' %}");
  ASSERT_FALSE(unsupported.is_ok());
  EXPECT_NE(unsupported.status().message().find("line 2"), std::string::npos) << unsupported.status().message();
}

}  // namespace
}  // namespace cohort::data
