// Values of the chat-template interpreter, printed the way Python prints
// them (str, repr, json.dumps with ensure_ascii=False), since templates
// render Python objects in transformers and the text must be identical.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "text/chat_template_ast.h"

namespace cohort::text::jinja {

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return make_dict(std::move(items));
    }
    default: return Value();
  }
}

Value Value::make_list(List x) {
  Value v;
  v.kind = kList;
  for (const Value& item : x) v.depth = std::max(v.depth, item.depth + 1);
  v.list = std::make_shared<List>(std::move(x));
  return v;
}

Value Value::make_dict(Dict x) {
  Value v;
  v.kind = kDict;
  for (const auto& [_, item] : x) v.depth = std::max(v.depth, item.depth + 1);
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case kUndefined:
    case kNone: return false;
    case kBool: return b;
    case kInt: return i != 0;
    case kFloat: return f != 0;
    case kString: return !s.empty();
    case kList: return !list->empty();
    case kDict: return !dict->empty();
    case kFunction: return true;
  }
  return false;
}

const Value* Value::find(const std::string& key) const {
  if (kind != kDict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

namespace {

std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  // Python writes 1e+20 as 1e+20 and 1e-05 as 1e-05, as printf does.
  return s;
}

std::string quote_repr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else out.push_back(char(c));
  }
  return out + q;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else out.push_back(char(c));
    }
  }
  return out + "\"";
}

}  // namespace

std::string Value::str() const {
  switch (kind) {
    case kUndefined: return "";
    case kNone: return "None";
    case kBool: return b ? "True" : "False";
    case kInt: return std::to_string(i);
    case kFloat: return python_float(f);
    case kString: return s;
    default: return repr();
  }
}

std::string Value::repr(int level) const {
  switch (kind) {
    case kString: return quote_repr(s);
    case kList: {
      if (level > ChatTemplateLimits::kMaxNesting) return "[...]";
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr(level + 1);
      return out + "]";
    }
    case kDict: {
      if (level > ChatTemplateLimits::kMaxNesting) return "{...}";
      std::string out = "{";
      for (size_t k = 0; k < dict->size(); ++k)
        out += (k ? ", " : "") + quote_repr((*dict)[k].first) + ": " + (*dict)[k].second.repr(level + 1);
      return out + "}";
    }
    case kFunction: return "<function>";
    default: return str();
  }
}

std::string Value::to_json(int indent, int level) const {
  if ((kind == kList || kind == kDict) && level > ChatTemplateLimits::kMaxNesting) return "null";
  const std::string pad = indent > 0 ? "\n" + std::string(size_t(indent * (level + 1)), ' ') : "";
  const std::string end_pad = indent > 0 ? "\n" + std::string(size_t(indent * level), ' ') : "";
  const std::string sep = indent > 0 ? "," : ", ";
  switch (kind) {
    case kUndefined:
    case kNone: return "null";
    case kBool: return b ? "true" : "false";
    case kInt: return std::to_string(i);
    case kFloat: return std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : python_float(f);
    case kString: return json_string(s);
    case kList: {
      if (list->empty()) return "[]";
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? sep : "") + pad + (*list)[k].to_json(indent, level + 1);
      return out + end_pad + "]";
    }
    case kDict: {
      if (dict->empty()) return "{}";
      std::string out = "{";
      for (size_t k = 0; k < dict->size(); ++k)
        out += (k ? sep : "") + pad + json_string((*dict)[k].first) + ": " + (*dict)[k].second.to_json(indent, level + 1);
      return out + end_pad + "}";
    }
    case kFunction: return "null";
  }
  return "null";
}

bool Value::equals(const Value& o, int level) const {
  if (level > ChatTemplateLimits::kMaxNesting) return false;
  if (is_number() && o.is_number()) return as_double() == o.as_double();
  if (kind != o.kind) return (kind == kUndefined || kind == kNone) && (o.kind == kUndefined || o.kind == kNone) && kind == o.kind;
  switch (kind) {
    case kString: return s == o.s;
    case kList:
      if (list->size() != o.list->size()) return false;
      for (size_t k = 0; k < list->size(); ++k)
        if (!(*list)[k].equals((*o.list)[k], level + 1)) return false;
      return true;
    case kDict:
      if (dict->size() != o.dict->size()) return false;
      for (const auto& [key, v] : *dict) {
        const Value* other = o.find(key);
        if (!other || !v.equals(*other, level + 1)) return false;
      }
      return true;
    case kFunction: return fn == o.fn;
    default: return true;
  }
}

}  // namespace cohort::text::jinja
