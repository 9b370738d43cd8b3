// Tool-call parsers (see tool_calls.h).
#include "infer/serve/tool_calls.h"

#include <string_view>

#include <nlohmann/json.hpp>

namespace cohort::infer {
namespace {

using nlohmann::json;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest suffix of `text` that is a proper prefix of
// `marker`: text that may still become the marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// One {"name": "...", "<arguments key>": {...}} object as it streams in.
// The name is known once the text reaches the arguments' first character;
// from then on the arguments are handed out as they come. An object in
// another key order is parsed whole once it closes.
class CallObject {
 public:
  enum class State { kOpen, kClosed, kFailed };

  // Consumes from `text` up to the object's closing brace; returns how much.
  size_t feed(std::string_view text) {
    size_t used = 0;
    for (; used < text.size() && state_ == State::kOpen; ++used) {
      const char c = text[used];
      raw_ += c;
      if (raw_.size() == 1 && c != '{') {
        state_ = State::kFailed;
      } else if (in_string_) {
        if (escape_) escape_ = false;
        else if (c == '\\') escape_ = true;
        else if (c == '"') in_string_ = false;
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        state_ = State::kClosed;
      }
    }
    if (!streaming_ && !fallback_) match_head();
    if (state_ == State::kClosed && !streaming_ && !parse_whole()) state_ = State::kFailed;
    return used;
  }

  State state() const { return state_; }
  const std::string& raw() const { return raw_; }
  bool named() const { return !name_.empty(); }
  const std::string& name() const { return name_; }
  // The arguments' text that became final since the last call.
  std::string take_arguments() {
    std::string out;
    if (streaming_) {
      scan_arguments();
      const size_t begin = args_begin_ + args_sent_;
      if (args_scanned_ > begin) out = raw_.substr(begin, args_scanned_ - begin);
    } else if (state_ == State::kClosed && whole_arguments_.size() > args_sent_) {
      out = whole_arguments_.substr(args_sent_);
    }
    args_sent_ += out.size();
    return out;
  }

 private:
  // {  "name"  :  "<string>"  ,  "arguments" | "parameters"  :  <value...
  void match_head() {
    size_t i = 0;
    auto ws = [&] { while (i < raw_.size() && is_space(raw_[i])) ++i; };
    // Each literal: all there (advance), a prefix of it at the end (wait), or not it (fall back).
    auto literal = [&](std::string_view want) -> int {
      const size_t have = std::min(want.size(), raw_.size() - i);
      if (raw_.compare(i, have, want.substr(0, have)) != 0) return -1;
      if (have < want.size()) return 0;
      i += want.size();
      return 1;
    };
    auto step = [&](int r) {
      if (r < 0) fallback_ = true;
      return r > 0;
    };
    if (!step(literal("{"))) return;
    ws();
    if (!step(literal("\"name\""))) return;
    ws();
    if (!step(literal(":"))) return;
    ws();
    if (i >= raw_.size()) return;
    if (raw_[i] != '"') return void(fallback_ = true);
    size_t j = i + 1;
    for (bool esc = false; j < raw_.size(); ++j) {
      if (esc) esc = false;
      else if (raw_[j] == '\\') esc = true;
      else if (raw_[j] == '"') break;
    }
    if (j >= raw_.size()) return;
    const json name = json::parse(raw_.substr(i, j + 1 - i), nullptr, false);
    if (!name.is_string() || name.get<std::string>().empty()) return void(fallback_ = true);
    i = j + 1;
    ws();
    if (!step(literal(","))) return;
    ws();
    const size_t key_at = i;
    int r = literal("\"arguments\"");
    if (r < 0) {
      i = key_at;
      r = literal("\"parameters\"");
    }
    if (!step(r)) return;
    ws();
    if (!step(literal(":"))) return;
    ws();
    if (i >= raw_.size()) return;
    // Objects and arrays stream; a string or a number is read whole.
    if (raw_[i] != '{' && raw_[i] != '[') return void(fallback_ = true);
    name_ = name.get<std::string>();
    streaming_ = true;
    args_begin_ = args_scanned_ = i;
  }

  // Advances args_scanned_ over the arguments value, to its end at most.
  void scan_arguments() {
    for (; args_scanned_ < raw_.size() && !args_done_; ++args_scanned_) {
      const char c = raw_[args_scanned_];
      if (args_in_string_) {
        if (args_escape_) args_escape_ = false;
        else if (c == '\\') args_escape_ = true;
        else if (c == '"') args_in_string_ = false;
      } else if (c == '"') {
        args_in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++args_depth_;
      } else if ((c == '}' || c == ']') && --args_depth_ == 0) {
        args_done_ = true;
      }
    }
  }

  bool parse_whole() {
    const json j = json::parse(raw_, nullptr, false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
      return false;
    }
    const json* args = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
    name_ = j["name"].get<std::string>();
    // OpenAI's arguments are JSON text; a model that wrote them as a
    // string of JSON meant that text.
    whole_arguments_ = !args ? "{}" : args->is_string() ? args->get<std::string>() : args->dump();
    return true;
  }

  State state_ = State::kOpen;
  std::string raw_;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  bool streaming_ = false, fallback_ = false;
  std::string name_;
  size_t args_begin_ = 0, args_scanned_ = 0, args_sent_ = 0;
  int args_depth_ = 0;
  bool args_in_string_ = false, args_escape_ = false, args_done_ = false;
  std::string whole_arguments_;
};

// What both formats share: the calls so far and their deltas.
class ParserBase : public ToolCallParser {
 public:
  explicit ParserBase(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}
  int calls() const override { return calls_; }
  // The text waits in pending_ until the format's state machine (advance)
  // can tell what it is.
  ToolParseOutput feed(const std::string& text) final {
    ToolParseOutput out;
    pending_ += text;
    for (bool progress = true; progress;) progress = advance(out);
    return out;
  }

 protected:
  // One move over pending_; false when it must wait for more text.
  virtual bool advance(ToolParseOutput& out) = 0;
  std::string pending_;
  // Feeds the current call; adds its deltas to `out`. Returns the text it
  // did not consume (after the object's end).
  std::string feed_call(const std::string& text, ToolParseOutput& out) {
    const size_t used = call_->feed(text);
    if (call_->named() && !announced_) {
      announced_ = true;
      out.calls.push_back({calls_, "call_" + id_prefix_ + "_" + std::to_string(calls_), call_->name(), ""});
      ++calls_;
    }
    if (announced_) {
      std::string args = call_->take_arguments();
      if (!args.empty()) {
        if (!out.calls.empty() && out.calls.back().index == calls_ - 1) out.calls.back().arguments += args;
        else out.calls.push_back({calls_ - 1, "", "", std::move(args)});
      }
    }
    return text.substr(used);
  }
  void start_call() {
    call_ = std::make_unique<CallObject>();
    announced_ = false;
  }

  std::unique_ptr<CallObject> call_;
  bool announced_ = false;
  int calls_ = 0;
  std::string id_prefix_;
};

constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";

class HermesParser final : public ParserBase {
 public:
  using ParserBase::ParserBase;

  ToolParseOutput finish() override {
    ToolParseOutput out;
    if (state_ == State::kText || state_ == State::kAfterCall) out.content += pending_;
    if ((state_ == State::kCall || state_ == State::kBad) && !announced_) {
      out.content += std::string(kToolCallOpen) + opened_with_ + (call_ ? call_->raw() : "") + pending_;
    }
    pending_.clear();
    return out;
  }

 private:
  enum class State { kText, kCall, kBad, kAfterCall };

  bool advance(ToolParseOutput& out) override {
    switch (state_) {
      case State::kText: {
        const size_t at = pending_.find(kToolCallOpen);
        if (at == std::string::npos) {
          const size_t keep = partial_marker(pending_, kToolCallOpen);
          out.content += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return false;
        }
        out.content += pending_.substr(0, at);
        pending_.erase(0, at + kToolCallOpen.size());
        state_ = State::kCall;
        opened_with_.clear();
        start_call();
        return true;
      }
      case State::kCall: {
        // Whitespace between the tag and the object is the model's layout.
        size_t lead = 0;
        while (!call_->raw().size() && lead < pending_.size() && is_space(pending_[lead])) ++lead;
        opened_with_ += pending_.substr(0, lead);
        pending_.erase(0, lead);
        if (pending_.empty()) return false;
        pending_ = feed_call(pending_, out);
        if (call_->state() == CallObject::State::kFailed) {
          state_ = announced_ ? State::kAfterCall : State::kBad;
          return true;
        }
        if (call_->state() == CallObject::State::kClosed) {
          state_ = State::kAfterCall;
          return true;
        }
        return false;
      }
      case State::kBad: {
        // Not a call: everything up to the closing tag is content.
        const size_t at = pending_.find(kToolCallClose);
        if (at == std::string::npos) return false;
        out.content += std::string(kToolCallOpen) + opened_with_ + call_->raw() + pending_.substr(0, at) +
                       std::string(kToolCallClose);
        pending_.erase(0, at + kToolCallClose.size());
        state_ = State::kText;
        return true;
      }
      case State::kAfterCall: {
        size_t i = 0;
        while (i < pending_.size() && is_space(pending_[i])) ++i;
        const std::string_view rest = std::string_view(pending_).substr(i);
        if (rest.substr(0, kToolCallClose.size()) == kToolCallClose) {
          pending_.erase(0, i + kToolCallClose.size());
          state_ = State::kText;
          return true;
        }
        if (rest.size() < kToolCallClose.size() && kToolCallClose.substr(0, rest.size()) == rest) return false;
        // No closing tag: what follows is text again.
        state_ = State::kText;
        return true;
      }
    }
    return false;
  }

  State state_ = State::kText;
  std::string opened_with_;  // whitespace after <tool_call>, for content if it is no call
};

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonParser final : public ParserBase {
 public:
  using ParserBase::ParserBase;

  ToolParseOutput finish() override {
    ToolParseOutput out;
    if (state_ == State::kStart || state_ == State::kText) out.content += pending_;
    if (state_ == State::kCall && !announced_) out.content += call_->raw() + pending_;
    pending_.clear();
    return out;
  }

 private:
  enum class State { kStart, kCall, kBetween, kText };

  bool advance(ToolParseOutput& out) override {
    switch (state_) {
      case State::kStart: {
        size_t i = 0;
        while (i < pending_.size() && is_space(pending_[i])) ++i;
        std::string_view rest = std::string_view(pending_).substr(i);
        if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
          rest.remove_prefix(kPythonTag.size());
          i += kPythonTag.size();
          while (!rest.empty() && is_space(rest[0])) rest.remove_prefix(1), ++i;
        }
        if (rest.empty() || (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest)) {
          return false;
        }
        if (rest[0] != '{') {
          state_ = State::kText;
          return true;
        }
        pending_.erase(0, i);
        state_ = State::kCall;
        start_call();
        return true;
      }
      case State::kCall: {
        pending_ = feed_call(pending_, out);
        if (call_->state() == CallObject::State::kFailed) {
          if (!announced_) out.content += call_->raw() + pending_;
          if (!announced_) pending_.clear();
          state_ = State::kText;
          return true;
        }
        if (call_->state() == CallObject::State::kClosed) {
          state_ = State::kBetween;
          return true;
        }
        return false;
      }
      case State::kBetween: {
        size_t i = 0;
        while (i < pending_.size() && (is_space(pending_[i]) || pending_[i] == ';')) ++i;
        if (i == pending_.size()) return false;
        if (pending_[i] == '{') {
          pending_.erase(0, i);
          state_ = State::kCall;
          start_call();
          return true;
        }
        pending_.erase(0, i);
        state_ = State::kText;
        return true;
      }
      case State::kText:
        out.content += pending_;
        pending_.clear();
        return false;
    }
    return false;
  }

  State state_ = State::kStart;
};

}  // namespace

void ToolParseOutput::append(ToolParseOutput more) {
  content += more.content;
  for (ToolCallDelta& d : more.calls) {
    if (!calls.empty() && calls.back().index == d.index && d.id.empty()) calls.back().arguments += d.arguments;
    else calls.push_back(std::move(d));
  }
}

const char* to_string(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
  }
  return "?";
}

Result<ToolCallFormat> parse_tool_call_format(const std::string& name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  return invalid_argument("tool-call format '" + name + "': give auto, hermes or llama3_json");
}

ToolCallFormat detect_tool_call_format(const std::string& chat_template) {
  if (chat_template.find("<tool_call>") != std::string::npos) return ToolCallFormat::kHermes;
  if (chat_template.find("<|python_tag|>") != std::string::npos ||
      chat_template.find("\"parameters\"") != std::string::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, std::string id_prefix) {
  if (format == ToolCallFormat::kLlama3Json) return std::make_unique<Llama3JsonParser>(std::move(id_prefix));
  return std::make_unique<HermesParser>(std::move(id_prefix));
}

}  // namespace cohort::infer
