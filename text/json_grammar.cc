// JSON schema to grammar, and the byte matcher (see json_grammar.h).
#include "text/json_grammar.h"

#include <algorithm>
#include <map>
#include <set>

namespace cohort::text {

using ojson = nlohmann::ordered_json;
using Kind = JsonGrammar::Kind;

class SchemaCompiler {
 public:
  SchemaCompiler(JsonGrammar& g, const ojson& root) : g_(g), root_(root) {}

  Result<int> compile(const ojson& s, const std::string& where, int depth) {
    if (depth > 64) return invalid_argument(where + ": the schema nests more than 64 levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return invalid_argument(where + ": the schema false allows no value");
      return add(JsonGrammar::Node{});
    }
    if (!s.is_object()) return invalid_argument(where + ": a schema must be an object or a boolean");
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
        "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "title",
        "description", "default", "examples", "$schema", "$id", "format", "strict", "nullable", "$comment"};
    for (const auto& [key, value] : s.items()) {
      if (!kKnown.count(key)) {
        return invalid_argument(where + "." + key + ": the keyword '" + key +
                                "' is not supported in structured output (docs/serving.md lists those that are)");
      }
    }
    if (s.contains("$ref")) return reference(s["$ref"], where + ".$ref", depth);
    if (s.contains("const")) return literals(ojson::array({s["const"]}));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return invalid_argument(where + ".enum: must be a non-empty array");
      return literals(s["enum"]);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const ojson& list = s[key];
      if (!list.is_array() || list.empty()) return invalid_argument(where + "." + key + ": must be a non-empty array");
      JsonGrammar::Node n;
      n.kind = Kind::kAnyOf;
      for (size_t i = 0; i < list.size(); ++i) {
        COHORT_ASSIGN_OR_RETURN(int c, compile(list[i], where + "." + key + "[" + std::to_string(i) + "]", depth + 1));
        n.choices.push_back(c);
      }
      return add(std::move(n));
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1) {
        return invalid_argument(where + ".allOf: only an allOf of one schema is supported");
      }
      return compile(s["allOf"][0], where + ".allOf[0]", depth + 1);
    }
    if (s.contains("type")) {
      const ojson& t = s["type"];
      std::vector<std::string> types;
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array()) for (const ojson& x : t) if (x.is_string()) types.push_back(x.get<std::string>());
      if (types.empty() || (t.is_array() && types.size() != t.size())) {
        return invalid_argument(where + ".type: must be a type name or an array of them");
      }
      if (s.contains("nullable")) {
        if (!s["nullable"].is_boolean()) return invalid_argument(where + ".nullable: must be true or false");
        if (s["nullable"].get<bool>()) types.push_back("null");
      }
      if (types.size() == 1) return typed(s, types[0], where, depth);
      JsonGrammar::Node n;
      n.kind = Kind::kAnyOf;
      for (const std::string& type : types) {
        COHORT_ASSIGN_OR_RETURN(int c, typed(s, type, where, depth));
        n.choices.push_back(c);
      }
      return add(std::move(n));
    }
    if (s.contains("properties") || s.contains("additionalProperties")) return typed(s, "object", where, depth);
    if (s.contains("items")) return typed(s, "array", where, depth);
    return add(JsonGrammar::Node{});
  }

 private:
  Result<int> add(JsonGrammar::Node n) {
    if (static_cast<int>(g_.nodes_.size()) >= JsonGrammar::kMaxNodes) {
      return invalid_argument("the schema is too large (more than " + std::to_string(JsonGrammar::kMaxNodes) + " parts)");
    }
    g_.nodes_.push_back(std::move(n));
    return static_cast<int>(g_.nodes_.size()) - 1;
  }
  int literal(const std::string& text) {
    g_.literals_.push_back(text);
    return static_cast<int>(g_.literals_.size()) - 1;
  }
  Result<int> literals(const ojson& values) {
    JsonGrammar::Node n;
    n.kind = Kind::kLiterals;
    for (const ojson& v : values) n.choices.push_back(literal(v.dump()));
    return add(std::move(n));
  }

  Result<int> reference(const ojson& ref, const std::string& where, int depth) {
    if (!ref.is_string()) return invalid_argument(where + ": must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    std::string name;
    const ojson* table = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) == 0 && root_.is_object() && root_.contains(p.substr(2, p.size() - 3))) {
        table = &root_[p.substr(2, p.size() - 3)];
        name = r.substr(p.size());
      }
    }
    if (!table || !table->is_object() || !table->contains(name)) {
      return invalid_argument(where + ": '" + r + "' names no schema under #/$defs or #/definitions");
    }
    // The node exists before its body, so a schema may refer to itself.
    COHORT_ASSIGN_OR_RETURN(int at, add(JsonGrammar::Node{}));
    refs_[r] = at;
    COHORT_ASSIGN_OR_RETURN(int body, compile((*table)[name], where + "(" + r + ")", depth + 1));
    JsonGrammar::Node alias;
    alias.kind = Kind::kAnyOf;
    alias.choices = {body};
    g_.nodes_[size_t(at)] = std::move(alias);
    return at;
  }

  Status bounded(const ojson& s, const char* key, const std::string& where, int lo, int hi, int* out) {
    if (!s.contains(key)) return Status::ok();
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < lo || s[key].get<int64_t>() > hi) {
      return invalid_argument(where + "." + key + ": must be an integer in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "]");
    }
    *out = static_cast<int>(s[key].get<int64_t>());
    return Status::ok();
  }

  Result<int> typed(const ojson& s, const std::string& type, const std::string& where, int depth) {
    JsonGrammar::Node n;
    if (type == "string") {
      n.kind = Kind::kString;
      COHORT_RETURN_IF_ERROR(bounded(s, "minLength", where, 0, 1 << 20, &n.min_length)); 
      COHORT_RETURN_IF_ERROR(bounded(s, "maxLength", where, 0, 1 << 20, &n.max_length)); 
      if (n.max_length >= 0 && n.max_length < n.min_length) {
        return invalid_argument(where + ": maxLength is below minLength");
      }
    } else if (type == "number" || type == "integer") {
      n.kind = type == "number" ? Kind::kNumber : Kind::kInteger;
    } else if (type == "boolean") {
      n.kind = Kind::kBoolean;
    } else if (type == "null") {
      n.kind = Kind::kNull;
    } else if (type == "array") {
      n.kind = Kind::kArray;
      COHORT_RETURN_IF_ERROR(bounded(s, "minItems", where, 0, JsonGrammar::kMaxFreeItems, &n.min_items)); 
      COHORT_RETURN_IF_ERROR(bounded(s, "maxItems", where, 0, 1 << 30, &n.max_items)); 
      n.max_items = std::min(n.max_items, JsonGrammar::kMaxFreeItems);
      if (n.max_items < n.min_items) return invalid_argument(where + ": maxItems is below minItems");
      COHORT_ASSIGN_OR_RETURN(n.items, s.contains("items") ? compile(s["items"], where + ".items", depth + 1)
                                                          : add(JsonGrammar::Node{}));
    } else if (type == "object") {
      return object(s, where, depth);
    } else {
      return invalid_argument(where + ".type: '" + type + "' is not a JSON type");
    }
    return add(std::move(n));
  }

  Result<int> object(const ojson& s, const std::string& where, int depth) {
    JsonGrammar::Node n;
    n.kind = Kind::kObject;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return invalid_argument(where + ".required: must be an array of names");
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) return invalid_argument(where + ".required: must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties") && !(s["properties"].is_object() && !s["properties"].empty())) {
      if (!s["properties"].is_object()) return invalid_argument(where + ".properties: must be an object");
    }
    if (s.contains("properties") && !s["properties"].empty()) {
      for (const auto& [name, sub] : s["properties"].items()) {
        COHORT_ASSIGN_OR_RETURN(int node, compile(sub, where + ".properties." + name, depth + 1));
        n.properties.push_back({literal(ojson(name).dump()), node, required.count(name) > 0});
        required.erase(name);
      }
      if (!required.empty()) {
        return invalid_argument(where + ".required: '" + *required.begin() + "' is not among the properties");
      }
      return add(std::move(n));
    }
    if (!required.empty()) return invalid_argument(where + ".required: the object lists no properties");
    n.free_keys = true;
    const ojson extra = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(true);
    if (extra.is_boolean() && !extra.get<bool>()) {
      n.max_items = 0;  // {}: the only object without keys
      COHORT_ASSIGN_OR_RETURN(n.additional, add(JsonGrammar::Node{}));
    } else {
      COHORT_ASSIGN_OR_RETURN(n.additional, compile(extra, where + ".additionalProperties", depth + 1));
    }
    return add(std::move(n));
  }

  JsonGrammar& g_;
  const ojson& root_;
  std::map<std::string, int> refs_;
};

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::compile(const ojson& schema, std::string prefix,
                                                               std::string suffix) {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->literals_ = {"true", "false", "null"};
  SchemaCompiler compiler(*g, schema);
  if (schema.is_null()) {  // any object
    ojson any_object = {{"type", "object"}};
    COHORT_ASSIGN_OR_RETURN(g->root_, compiler.compile(any_object, "schema", 0));
  } else {
    COHORT_ASSIGN_OR_RETURN(g->root_, compiler.compile(schema, "schema", 0));
  }
  if (!prefix.empty()) g->literals_.push_back(std::move(prefix)), g->prefix_ = int(g->literals_.size()) - 1;
  if (!suffix.empty()) g->literals_.push_back(std::move(suffix)), g->suffix_ = int(g->literals_.size()) - 1;
  return std::shared_ptr<const JsonGrammar>(std::move(g));
}

// ---------------------------------------------------------------- matcher

namespace {

enum FrameKind : uint8_t { kValue, kLiteral, kString, kNumber, kObject, kArray };
enum ContainerPhase : uint8_t { kAfterOpen, kAfterKey, kAfterValue, kAfterComma };
// Number phases: after '-', after a leading 0, in the integer digits, after
// '.', in the fraction, after 'e', after the exponent's sign, in it.
enum NumberPhase : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool number_may_end(uint8_t phase) { return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits; }

using Frame = JsonMatcher::Frame;
using Stack = JsonMatcher::Stack;

struct Stepper {
  const JsonGrammar& g;
  std::vector<Stack>& out;

  void push(Stack& s, Frame f) { s.frames.push_back(f); }

  void step(Stack s, unsigned char c, int depth) {
    if (depth > 64 || s.frames.empty()) return;
    const bool ws = is_space(c);
    Frame& f = s.frames.back();
    if (!ws && f.kind != kString) s.whitespace = 0;
    auto whitespace = [&] {
      if (s.whitespace >= JsonGrammar::kMaxWhitespaceRun) return;
      ++s.whitespace;
      out.push_back(std::move(s));
    };
    switch (f.kind) {
      case kValue: {
        if (ws) return whitespace();
        const JsonGrammar::Node& n = g.nodes()[size_t(f.node)];
        switch (n.kind) {
          case Kind::kAnyOf:
            for (int choice : n.choices) {
              Stack t = s;
              t.frames.back().node = choice;
              step(std::move(t), c, depth + 1);
            }
            return;
          case Kind::kLiterals:
            for (int lit : n.choices) {
              Stack t = s;
              t.frames.back() = Frame{kLiteral, 0, 0, lit, 0};
              step(std::move(t), c, depth + 1);
            }
            return;
          case Kind::kBoolean:
          case Kind::kNull: {
            const int lit = n.kind == Kind::kNull ? JsonGrammar::kNull : c == 't' ? JsonGrammar::kTrue : JsonGrammar::kFalse;
            f = Frame{kLiteral, 0, 0, lit, 0};
            return step(std::move(s), c, depth + 1);
          }
          case Kind::kObject:
            if (c != '{') return;
            f = Frame{kObject, kAfterOpen, f.node, 0, -1};
            break;
          case Kind::kArray:
            if (c != '[') return;
            f = Frame{kArray, kAfterOpen, f.node, 0, 0};
            break;
          case Kind::kString:
            if (c != '"') return;
            f = Frame{kString, 0, f.node, 0, 0};
            break;
          case Kind::kNumber:
          case Kind::kInteger:
            if (c != '-' && !is_digit(c)) return;
            f = Frame{kNumber, uint8_t(c == '-' ? kMinus : c == '0' ? kZero : kInt), f.node, 0, 1};
            break;
          case Kind::kAny:
            if (c == '{') f = Frame{kObject, kAfterOpen, f.node, 0, -1};
            else if (c == '[') f = Frame{kArray, kAfterOpen, f.node, 0, 0};
            else if (c == '"') f = Frame{kString, 0, f.node, 0, 0};
            else if (c == '-' || is_digit(c)) f = Frame{kNumber, uint8_t(c == '-' ? kMinus : c == '0' ? kZero : kInt), f.node, 0, 1};
            else if (c == 't' || c == 'f' || c == 'n') {
              f = Frame{kLiteral, 0, 0, c == 't' ? JsonGrammar::kTrue : c == 'f' ? JsonGrammar::kFalse : JsonGrammar::kNull, 1};
            } else {
              return;
            }
            break;
        }
        out.push_back(std::move(s));
        return;
      }
      case kLiteral: {
        const std::string& text = g.literal(f.a);
        if (static_cast<unsigned char>(text[size_t(f.b)]) != c) return;
        if (++f.b == static_cast<int32_t>(text.size())) s.frames.pop_back();
        s.whitespace = 0;
        out.push_back(std::move(s));
        return;
      }
      case kString: return string(std::move(s), c);
      case kNumber: return number(std::move(s), c, depth);
      case kObject: return ws ? whitespace() : object(std::move(s), c);
      case kArray: return ws ? whitespace() : array(std::move(s), c, depth);
    }
  }

  void string(Stack s, unsigned char c) {
    Frame& f = s.frames.back();
    s.whitespace = 0;
    const JsonGrammar::Node* n = f.node >= 0 ? &g.nodes()[size_t(f.node)] : nullptr;
    const int min_len = n && n->kind == Kind::kString ? n->min_length : 0;
    const int max_len = n ? (n->kind == Kind::kString ? n->max_length : -1) : JsonGrammar::kMaxKeyBytes;
    const bool counted = min_len > 0 || max_len >= 0;
    auto one_more = [&] {
      if (max_len >= 0 && f.a >= max_len) return false;
      if (counted) ++f.a;  // unbounded strings stay one state, so their masks cache
      return true;
    };
    const int pending = f.phase & 3;  // UTF-8 continuation bytes still to come
    if (pending > 0) {
      // The first continuation byte's range rules out overlong forms,
      // surrogates and code points past U+10FFFF (as a JSON parser does).
      static constexpr unsigned char kLow[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
      static constexpr unsigned char kHigh[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
      const int range = f.phase >> 2;
      if (c < kLow[range] || c > kHigh[range]) return;
      f.phase = uint8_t(pending - 1);
      out.push_back(std::move(s));
      return;
    }
    if (f.b == 1) {  // after a backslash
      if (c == 'u') f.b = 2;
      else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') f.b = 0;
      else return;
    } else if (f.b >= 2) {  // \uXXXX: f.b - 2 hex digits read
      if (!is_hex(c)) return;
      if (++f.b == 6) f.b = 0;
    } else if (c == '"') {
      if (f.a < min_len) return;
      s.frames.pop_back();
    } else if (c == '\\') {
      if (!one_more()) return;
      f.b = 1;
    } else if (c < 0x20) {
      return;
    } else if (c >= 0x80) {
      int more = 0, range = 0;
      if (c >= 0xC2 && c <= 0xDF) more = 1;
      else if (c == 0xE0) more = 2, range = 1;
      else if (c == 0xED) more = 2, range = 2;
      else if (c >= 0xE1 && c <= 0xEF) more = 2;
      else if (c == 0xF0) more = 3, range = 3;
      else if (c >= 0xF1 && c <= 0xF3) more = 3;
      else if (c == 0xF4) more = 3, range = 4;
      else return;  // a stray continuation byte, or one no UTF-8 has
      if (!one_more()) return;  // a code point counts once, at its first byte
      f.phase = uint8_t(more | (range << 2));
    } else if (!one_more()) {
      return;
    }
    out.push_back(std::move(s));
  }

  void number(Stack s, unsigned char c, int depth) {
    Frame& f = s.frames.back();
    const bool integer = g.nodes()[size_t(f.node)].kind == Kind::kInteger;
    uint8_t next = 255;
    if (f.b < JsonGrammar::kMaxNumberBytes) {
      switch (f.phase) {
        case kMinus: next = c == '0' ? kZero : is_digit(c) ? kInt : 255; break;
        case kZero: next = (!integer && c == '.') ? kDot : (!integer && (c == 'e' || c == 'E')) ? kExp : 255; break;
        case kInt: next = is_digit(c) ? kInt : (!integer && c == '.') ? kDot : (!integer && (c == 'e' || c == 'E')) ? kExp : 255; break;
        case kDot: next = is_digit(c) ? kFrac : 255; break;
        case kFrac: next = is_digit(c) ? kFrac : (c == 'e' || c == 'E') ? kExp : 255; break;
        case kExp: next = (c == '+' || c == '-') ? kExpSign : is_digit(c) ? kExpDigits : 255; break;
        case kExpSign:
        case kExpDigits: next = is_digit(c) ? kExpDigits : 255; break;
      }
    }
    if (next != 255) {
      f.phase = next;
      ++f.b;
      s.whitespace = 0;
      out.push_back(std::move(s));
      return;
    }
    // The byte is not the number's: it ends here, and the byte is the next frame's.
    if (!number_may_end(f.phase)) return;
    s.frames.pop_back();
    step(std::move(s), c, depth + 1);
  }

  void object(Stack s, unsigned char c) {
    Frame& f = s.frames.back();
    const JsonGrammar::Node& n = g.nodes()[size_t(f.node)];
    const bool free = n.kind == Kind::kAny || n.free_keys;
    const int max_keys = n.kind == Kind::kAny ? JsonGrammar::kMaxFreeItems : n.max_items;
    auto none_required_from = [&](int from) {
      if (free) return true;
      for (size_t i = size_t(from); i < n.properties.size(); ++i) if (n.properties[i].required) return false;
      return true;
    };
    switch (f.phase) {
      case kAfterOpen:
      case kAfterComma:
        if (c == '}' && f.phase == kAfterOpen && none_required_from(f.a)) {
          s.frames.pop_back();
          out.push_back(std::move(s));
        } else if (c == '"' && free) {
          if (f.a >= max_keys) return;
          f.phase = kAfterKey;
          ++f.a;
          push(s, Frame{kString, 0, -1, 0, 0});
          out.push_back(std::move(s));
        } else if (c == '"') {
          for (size_t i = size_t(f.a); i < n.properties.size(); ++i) {
            Stack t = s;
            Frame& o = t.frames.back();
            o.phase = kAfterKey;
            o.a = static_cast<int32_t>(i) + 1;
            o.b = static_cast<int32_t>(i);
            push(t, Frame{kLiteral, 0, 0, n.properties[i].literal, 1});
            out.push_back(std::move(t));
            if (n.properties[i].required) break;
          }
        }
        return;
      case kAfterKey:
        if (c != ':') return;
        f.phase = kAfterValue;
        push(s, Frame{kValue, 0, free ? (n.kind == Kind::kAny ? f.node : n.additional) : n.properties[size_t(f.b)].node, 0, 0});
        out.push_back(std::move(s));
        return;
      case kAfterValue:
        if (c == ',' && (free ? f.a < max_keys : f.a < static_cast<int32_t>(n.properties.size()))) {
          f.phase = kAfterComma;
          out.push_back(std::move(s));
        } else if (c == '}' && none_required_from(f.a)) {
          s.frames.pop_back();
          out.push_back(std::move(s));
        }
        return;
    }
  }

  void array(Stack s, unsigned char c, int depth) {
    Frame& f = s.frames.back();
    const JsonGrammar::Node& n = g.nodes()[size_t(f.node)];
    const bool any = n.kind == Kind::kAny;
    const int items = any ? f.node : n.items;
    const int min_items = any ? 0 : n.min_items, max_items = any ? JsonGrammar::kMaxFreeItems : n.max_items;
    if (f.phase == kAfterValue) {
      if (c == ',' && f.a < max_items) {
        f.phase = kAfterComma;
        out.push_back(std::move(s));
      } else if (c == ']' && f.a >= min_items) {
        s.frames.pop_back();
        out.push_back(std::move(s));
      }
      return;
    }
    if (c == ']' && f.phase == kAfterOpen && min_items == 0) {
      s.frames.pop_back();
      out.push_back(std::move(s));
      return;
    }
    if (f.a >= max_items) return;
    f.phase = kAfterValue;
    ++f.a;
    push(s, Frame{kValue, 0, items, 0, 0});
    step(std::move(s), c, depth + 1);  // the byte starts the item
  }
};

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  Stack s;
  if (grammar_->suffix_literal() >= 0) s.frames.push_back(Frame{kLiteral, 0, 0, grammar_->suffix_literal(), 0});
  s.frames.push_back(Frame{kValue, 0, grammar_->root(), 0, 0});
  if (grammar_->prefix_literal() >= 0) s.frames.push_back(Frame{kLiteral, 0, 0, grammar_->prefix_literal(), 0});
  stacks_.push_back(std::move(s));
}

bool JsonMatcher::feed(unsigned char byte) {
  std::vector<Stack> next;
  Stepper stepper{*grammar_, next};
  for (const Stack& s : stacks_) stepper.step(s, byte, 0);
  if (next.empty()) return false;
  // The same stack reached two ways is one future.
  std::vector<Stack> unique;
  for (Stack& s : next) {
    if (unique.size() >= size_t(JsonGrammar::kMaxWays)) break;
    if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(std::move(s));
  }
  stacks_ = std::move(unique);
  return true;
}

bool JsonMatcher::feed(const std::string& bytes) {
  JsonMatcher copy = *this;
  for (unsigned char c : bytes) {
    if (!copy.feed(c)) return false;
  }
  *this = std::move(copy);
  return true;
}

bool JsonMatcher::complete() const {
  for (const Stack& s : stacks_) {
    if (s.frames.empty()) return true;
    if (s.frames.size() == 1 && s.frames[0].kind == kNumber && number_may_end(s.frames[0].phase)) return true;
  }
  return false;
}

std::string JsonMatcher::key() const {
  std::string k;
  for (const Stack& s : stacks_) {
    const int32_t head[] = {static_cast<int32_t>(s.frames.size()), s.whitespace};
    k.append(reinterpret_cast<const char*>(head), sizeof head);
    for (const Frame& f : s.frames) {
      const int32_t parts[] = {f.kind, f.phase, f.node, f.a, f.b};
      k.append(reinterpret_cast<const char*>(parts), sizeof parts);
    }
  }
  return k;
}

}  // namespace cohort::text
