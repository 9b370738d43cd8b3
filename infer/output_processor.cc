// OutputProcessor (see output_processor.h).
#include "infer/output_processor.h"

#include <algorithm>

namespace cohort::infer {
namespace {

// Bytes at the end of `text` that begin a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

Result<OutputProcessor> OutputProcessor::create(const text::Tokenizer* tokenizer, std::vector<int32_t> stop_ids,
                                                std::vector<std::string> stop_strings, bool skip_special) {
  jobs::InferSection stops;
  stops.stop_strings = stop_strings;
  for (int32_t id : stop_ids) stops.stop_tokens.push_back(id);
  COHORT_ASSIGN_OR_RETURN(StopCondition stop, StopCondition::create(stops, tokenizer));
  OutputProcessor p(tokenizer, std::make_shared<const StopCondition>(std::move(stop)), skip_special);
  p.stop_ids_ = std::move(stop_ids);
  return p;
}

OutputProcessor::OutputProcessor(const text::Tokenizer* tokenizer, std::shared_ptr<const StopCondition> stop,
                                 bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special), stop_(std::move(stop)) {
  if (stop_) {
    stop_ids_ = stop_->stop_tokens();
    stop_strings_ = stop_->stop_strings();
  }
  for (const std::string& s : stop_strings_) longest_stop_ = std::max(longest_stop_, s.size());
}

void OutputProcessor::add(int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top) {
  tokens_.push_back(token);
  logprobs_.push_back(logprob);
  if (!top.empty()) {
    top_.resize(tokens_.size() - 1);
    top_.push_back(std::move(top));
  }
}

std::string OutputProcessor::id_text(int32_t id) const { return tokenizer_ ? tokenizer_->decode({id}) : ""; }

std::string OutputProcessor::token_text(size_t i) const {
  return tokenizer_ && i < tokens_.size() ? tokenizer_->decode({tokens_[i]}) : "";
}

std::vector<int32_t> OutputProcessor::shown(const std::vector<int32_t>& ids) const {
  if (!skip_special_) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int32_t id : ids) if (!tokenizer_->is_special(id)) out.push_back(id);
  return out;
}

std::string OutputProcessor::full_text() const {
  if (!tokenizer_) return {};
  std::string text = tokenizer_->decode(shown(tokens_));
  size_t cut = std::string::npos;
  for (const std::string& s : stop_strings_) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

std::string OutputProcessor::take_text(bool finished) {
  if (!tokenizer_) return {};
  if (finished) {
    const std::string all = full_text();
    const std::string out = all.size() > sent_ ? all.substr(sent_) : "";
    sent_ = std::max(sent_, all.size());
    return out;
  }
  // Byte-level tokenizers decode token by token, so the text grows by
  // appending (no re-decoding of the whole sequence per token); only a
  // consumer that streams pays for it.
  for (; decoded_ < tokens_.size(); ++decoded_) {
    if (!(skip_special_ && tokenizer_->is_special(tokens_[decoded_]))) text_ += tokenizer_->decode({tokens_[decoded_]});
  }
  size_t hold = incomplete_utf8_tail(text_);
  // A stop string may be forming at the end: keep back what could be its start.
  if (longest_stop_ > 1) hold = std::max(hold, longest_stop_ - 1);
  size_t visible = text_.size() > hold ? text_.size() - hold : 0;
  // A stop string already complete (the sequence ends at the next event)
  // is never shown, nor anything after it.
  const size_t from = sent_ > longest_stop_ ? sent_ - longest_stop_ : 0;
  for (const std::string& s : stop_strings_) visible = std::min(visible, text_.find(s, from));
  if (visible <= sent_) return {};
  std::string out = text_.substr(sent_, visible - sent_);
  sent_ = visible;
  return out;
}

}  // namespace cohort::infer
