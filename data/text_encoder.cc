// Documents, chat lines and prompt/completion lines to tokens and loss masks.
//
// Assistant spans of a chat: the template's {% generation %} blocks when it
// has them; else, per assistant message i, the text that rendering
// messages[:i+1] adds to messages[:i] with the generation prompt (when the
// renderings are prefixes of the whole, as for Llama 3); else the text from
// that generation prompt's next occurrence to the end-of-turn marker that
// follows the message (templates that rewrite earlier turns, as Qwen3 drops
// their reasoning). The text is tokenized piecewise at the span edges, which
// sit at special tokens, so the pieces tokenize as the whole does.
#include "data/text_encoder.h"

#include "hf/model_folder.h"

#include <filesystem>
#include <fstream>

namespace cohort::data {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Trailing newlines after the end-of-turn token are the template's layout,
// not something the model should learn to emit.
size_t trim_span_end(const std::string& text, size_t begin, size_t end) {
  while (end > begin && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end;
}

}  // namespace

Result<std::unique_ptr<TextEncoder>> TextEncoder::open(const std::string& hf_dir, int model_vocab) {
  std::unique_ptr<TextEncoder> e(new TextEncoder());
  std::optional<hf::ModelFolder> folder;
  if (!hf_dir.empty()) {
    auto opened = hf::ModelFolder::open(hf_dir);
    if (!opened) return opened.status();
    folder = std::move(*opened);
  }
  if (!folder || !folder->has_tokenizer()) {
    if (model_vocab != 256 && model_vocab != 0)
      return failed_precondition(
          "text data needs the model's tokenizer, and this model (vocabulary " + std::to_string(model_vocab) +
          ") has none" + (hf_dir.empty() ? "" : " (no tokenizer.json or tokenizer.model in " + hf_dir + ")") +
          ": use [model] hf_dir with the tokenizer files, or give token shards (cohort tokenize INPUT --model HF_DIR --out DIR)");
    e->tokenizer_ = std::make_unique<text::ByteTokenizer>();
    e->source_ = "bytes";
    return e;
  }
  COHORT_ASSIGN_OR_RETURN(e->tokenizer_, folder->open_tokenizer());
  e->source_ = folder->tokenizer_source();
  e->chat_ = folder->chat();
  const int vocab = model_vocab > 0 ? model_vocab : e->tokenizer_->vocab_size();
  e->eos_ = folder->document_eos(*e->tokenizer_, vocab);
  return e;
}

std::unique_ptr<TextEncoder> TextEncoder::clone() const {
  std::unique_ptr<TextEncoder> e(new TextEncoder());
  e->tokenizer_ = tokenizer_->clone();
  e->chat_ = chat_;
  e->source_ = source_;
  e->eos_ = eos_;
  return e;
}

EncodedDocument TextEncoder::encode_text(const std::string& text) {
  EncodedDocument d;
  d.tokens = tokenizer_->encode_with_special_tokens(text);
  if (eos_ && (d.tokens.empty() || d.tokens.back() != *eos_)) d.tokens.push_back(*eos_);
  return d;
}

Result<text::RenderedChat> TextEncoder::render_chat(const ojson& line) const {
  if (!chat_) return failed_precondition("chat data needs a chat template, and the model's tokenizer_config.json has none");
  const ojson& messages = line.at("messages");
  const ojson tools = line.contains("tools") ? line["tools"] : ojson();
  COHORT_ASSIGN_OR_RETURN(text::RenderedChat full, chat_->render(messages, tools, false));
  if (!full.generation_spans.empty()) return full;
  size_t cursor = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].value("role", "") != "assistant") continue;
    const ojson before(messages.begin(), messages.begin() + long(i));
    const ojson upto(messages.begin(), messages.begin() + long(i) + 1);
    COHORT_ASSIGN_OR_RETURN(text::RenderedChat plain, chat_->render(before, tools, false));
    COHORT_ASSIGN_OR_RETURN(text::RenderedChat prompt, chat_->render(before, tools, true));
    COHORT_ASSIGN_OR_RETURN(text::RenderedChat with, chat_->render(upto, tools, false));
    const std::string& p = prompt.text;
    const std::string& q = with.text;
    if (full.text.compare(0, q.size(), q) == 0 && q.compare(0, p.size(), p) == 0 && p.size() >= cursor) {
      full.generation_spans.emplace_back(p.size(), trim_span_end(q, p.size(), q.size()));
      cursor = q.size();
      continue;
    }
    // The generation prompt (what add_generation_prompt appends), and the
    // end-of-turn text after the message, found by rendering it with a
    // sentinel for its content.
    const std::string header = p.compare(0, plain.text.size(), plain.text) == 0 ? p.substr(plain.text.size()) : "";
    static const std::string kSentinel = "\x01cohort-content\x01";
    // Only role and content: tool calls print differently around empty
    // content (Qwen3 puts a newline before <tool_call> only after text), and
    // the marker wanted is what closes any assistant turn.
    ojson marked = upto;
    marked[i] = ojson{{"role", "assistant"}, {"content", kSentinel}};
    COHORT_ASSIGN_OR_RETURN(text::RenderedChat with_sentinel, chat_->render(marked, tools, false));
    const size_t sentinel_at = with_sentinel.text.rfind(kSentinel);
    const std::string end_marker =
        sentinel_at == std::string::npos ? "" : with_sentinel.text.substr(sentinel_at + kSentinel.size());
    const size_t at = header.empty() ? std::string::npos : full.text.find(header, cursor);
    const size_t end = at == std::string::npos || end_marker.empty() ? std::string::npos
                                                                     : full.text.find(end_marker, at + header.size());
    if (end == std::string::npos)
      return invalid_argument("cannot find messages[" + std::to_string(i) + "] (assistant) in the rendered chat");
    const size_t begin = at + header.size(), stop = end + end_marker.size();
    full.generation_spans.emplace_back(begin, trim_span_end(full.text, begin, stop));
    cursor = stop;
  }
  return full;
}

Result<EncodedDocument> TextEncoder::encode_chat(const ojson& line) {
  COHORT_ASSIGN_OR_RETURN(text::RenderedChat chat, render_chat(line));
  EncodedDocument d;
  size_t at = 0;
  auto add = [&](size_t begin, size_t end, uint8_t trained) {
    if (end <= begin) return;
    const std::vector<int32_t> ids = tokenizer_->encode(chat.text.substr(begin, end - begin));
    d.tokens.insert(d.tokens.end(), ids.begin(), ids.end());
    d.mask.insert(d.mask.end(), ids.size(), trained);
  };
  for (const auto& [begin, end] : chat.generation_spans) {
    if (begin < at) continue;  // overlapping spans: keep the first
    add(at, begin, 0);
    add(begin, end, 1);
    at = end;
  }
  add(at, chat.text.size(), 0);
  return d;
}

Result<EncodedDocument> TextEncoder::encode_line(const std::string& line, DataFormat format, const std::string& text_field) {
  COHORT_RETURN_IF_ERROR(check_json_line(line, format, text_field));
  const ojson j = ojson::parse(line);
  switch (format) {
    case DataFormat::kJsonl: return encode_text(j[text_field].get<std::string>());
    case DataFormat::kChat: return encode_chat(j);
    case DataFormat::kPromptCompletion: {
      EncodedDocument d;
      d.tokens = tokenizer_->prefix_tokens();
      const auto prompt = tokenizer_->encode(j["prompt"].get<std::string>());
      d.tokens.insert(d.tokens.end(), prompt.begin(), prompt.end());
      d.mask.assign(d.tokens.size(), 0);
      std::vector<int32_t> completion = tokenizer_->encode(j["completion"].get<std::string>());
      if (eos_) completion.push_back(*eos_);
      d.tokens.insert(d.tokens.end(), completion.begin(), completion.end());
      d.mask.insert(d.mask.end(), completion.size(), 1);
      return d;
    }
    default: return invalid_argument(std::string("format ") + format_name(format) + " has no JSONL lines");
  }
}

}  // namespace cohort::data
