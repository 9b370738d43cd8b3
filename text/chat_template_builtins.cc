// The filters, tests, string/dict methods and globals that Hugging Face chat
// templates call, with Python's semantics (str.strip, str.split, json.dumps
// as transformers' tojson calls it: ensure_ascii=False, key order kept).
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <ctime>

#include "text/chat_template_ast.h"

namespace cohort::text::jinja {
namespace {

bool is_py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip_this = [&](unsigned char c) {
    return chars && chars->kind == Value::kString ? chars->s.find(char(c)) != std::string::npos : is_py_space(c);
  };
  size_t b = 0, e = s.size();
  while (left && b < e && strip_this(static_cast<unsigned char>(s[b]))) ++b;
  while (right && e > b && strip_this(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

Value py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List parts;
  if (!sep || sep->kind != Value::kString) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) j = s.size();
      else
        while (j < s.size() && !is_py_space(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return Value::make_list(std::move(parts));
  }
  size_t last = 0;
  for (size_t at = s.find(sep->s); !sep->s.empty() && at != std::string::npos; at = s.find(sep->s, last)) {
    if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) break;
    parts.push_back(Value::string(s.substr(last, at - last)));
    last = at + sep->s.size();
  }
  parts.push_back(Value::string(s.substr(last)));
  return Value::make_list(std::move(parts));
}

std::string case_map(std::string s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  bool word_start = true;
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (mode == 0) c = std::tolower(c);
    else if (mode == 1) c = std::toupper(c);
    else if (mode == 2) c = word_start ? std::toupper(c) : std::tolower(c);
    else c = k == 0 ? std::toupper(c) : std::tolower(c);
    word_start = !std::isalnum(c);
    s[k] = char(c);
  }
  return s;
}

std::string replace_text(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t last = 0;
  int64_t done = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || done < count); at = s.find(from, last)) {
    // Past kMaxBytes the caller's size check refuses the result: stop here
    // rather than build it (a 32 MB string replaced into itself).
    if (out.size() > ChatTemplateLimits::kMaxBytes) return out;
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
    ++done;
  }
  return out + s.substr(last);
}

const Value* kwarg(const Kwargs& kwargs, const std::string& name) {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

const Value* arg(const std::vector<Value>& args, size_t i, const Kwargs& kwargs, const char* name) {
  if (i < args.size()) return &args[i];
  return kwarg(kwargs, name);
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Value::kString: {
      int64_t n = 0;
      for (unsigned char c : v.s) n += (c & 0xc0) != 0x80;
      return n;
    }
    case Value::kList: return int64_t(v.list->size());
    case Value::kDict: return int64_t(v.dict->size());
    default: return 0;
  }
}

Value attribute_of(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const Value* next = cur.find(part);
    cur = next ? *next : Value();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Result<Value> select_items(const std::string& name, const Value& input, const std::vector<Value>& args, int line) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_match = name == "select" || name == "selectattr";
  List out;
  if (input.kind != Value::kList) return Value::make_list();
  for (const Value& item : *input.list) {
    Value subject = by_attr && !args.empty() ? attribute_of(item, args[0].str()) : item;
    const size_t test_at = by_attr ? 1 : 0;
    bool ok;
    if (args.size() > test_at) {
      std::vector<Value> test_args(args.begin() + long(test_at) + 1, args.end());
      COHORT_ASSIGN_OR_RETURN(ok, apply_test(args[test_at].str(), subject, test_args, line));
    } else {
      ok = subject.truthy();
    }
    if (ok == keep_match) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Status template_error(int line, const std::string& what) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what);
}

Status limit_error(int line, const std::string& what, const std::string& limit, int64_t value) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what + " exceeds " + limit +
                            " (" + std::to_string(value) + ")");
}

Status check_bytes(size_t bytes, int line) {
  if (bytes <= ChatTemplateLimits::kMaxBytes) return Status::ok();
  return limit_error(line, "a string of " + std::to_string(bytes) + " bytes", "ChatTemplateLimits::kMaxBytes",
                     int64_t(ChatTemplateLimits::kMaxBytes));
}

Result<Value> apply_filter(const std::string& name, const Value& input, const std::vector<Value>& args,
                           const Kwargs& kwargs, int line) {
  if (name == "trim") return Value::string(py_strip(input.str(), arg(args, 0, kwargs, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length_of(input));
  if (name == "tojson") {
    const Value* indent = arg(args, 0, kwargs, "indent");
    // An indent is printed once a level: a width past 64 is refused, not built.
    if (indent && indent->kind == Value::kInt && (indent->i < 0 || indent->i > 64))
      return limit_error(line, "tojson indent " + std::to_string(indent->i), "64", 64);
    return Value::string(input.to_json(indent && indent->kind == Value::kInt ? int(indent->i) : 0));
  }
  if (name == "upper") return Value::string(case_map(input.str(), 1));
  if (name == "lower") return Value::string(case_map(input.str(), 0));
  if (name == "title") return Value::string(case_map(input.str(), 2));
  if (name == "capitalize") return Value::string(case_map(input.str(), 3));
  if (name == "string") return Value::string(input.str());
  if (name == "safe" || name == "e" || name == "escape") return input.kind == Value::kString ? input : Value::string(input.str());
  if (name == "int") {
    if (input.kind == Value::kString) return Value::integer(std::strtoll(input.s.c_str(), nullptr, 10));
    if (input.kind == Value::kInt) return input;
    const double d = input.as_double();
    if (!std::isfinite(d)) return Value::integer(0);  // jinja2's int filter: 0 where it cannot convert
    if (d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) return template_error(line, "integer overflow in int");
    return Value::integer(int64_t(d));
  }
  if (name == "float") return Value::number(input.kind == Value::kString ? std::strtod(input.s.c_str(), nullptr) : input.as_double());
  if (name == "abs") return input.kind == Value::kInt ? Value::integer(input.i == INT64_MIN ? input.i : std::llabs(input.i)) : Value::number(std::abs(input.as_double()));
  if (name == "default" || name == "d") {
    const Value* fallback = arg(args, 0, kwargs, "default_value");
    const Value* boolean = arg(args, 1, kwargs, "boolean");
    const bool use = boolean && boolean->truthy() ? !input.truthy() : !input.defined();
    return use ? (fallback ? *fallback : Value::string("")) : input;
  }
  if (name == "first" || name == "last") {
    if (input.kind == Value::kList) {
      if (input.list->empty()) return Value();
      return name == "first" ? input.list->front() : input.list->back();
    }
    if (input.kind == Value::kString && !input.s.empty())
      return Value::string(name == "first" ? input.s.substr(0, 1) : input.s.substr(input.s.size() - 1));
    return Value();
  }
  if (name == "list") {
    if (input.kind == Value::kList) return input;
    List items;
    if (input.kind == Value::kDict)
      for (const auto& [k, _] : *input.dict) items.push_back(Value::string(k));
    if (input.kind == Value::kString) {
      if (input.s.size() > ChatTemplateLimits::kMaxItems)
        return limit_error(line, "a list of " + std::to_string(input.s.size()) + " characters",
                           "ChatTemplateLimits::kMaxItems", int64_t(ChatTemplateLimits::kMaxItems));
      for (char c : input.s) items.push_back(Value::string(std::string(1, c)));
    }
    return Value::make_list(std::move(items));
  }
  if (name == "items" || name == "dictsort") {
    List items;
    if (input.kind == Value::kDict)
      for (const auto& [k, v] : *input.dict) items.push_back(Value::make_list({Value::string(k), v}));
    if (name == "dictsort")
      std::stable_sort(items.begin(), items.end(), [](const Value& a, const Value& b) { return (*a.list)[0].s < (*b.list)[0].s; });
    return Value::make_list(std::move(items));
  }
  if (name == "join") {
    const Value* sep = arg(args, 0, kwargs, "d");
    const Value* attr = arg(args, 1, kwargs, "attribute");
    std::string out;
    if (input.kind == Value::kList)
      for (size_t k = 0; k < input.list->size() && out.size() <= ChatTemplateLimits::kMaxBytes; ++k)
        out += (k ? (sep ? sep->str() : "") : "") + (attr ? attribute_of((*input.list)[k], attr->str()) : (*input.list)[k]).str();
    return Value::string(out);
  }
  if (name == "replace") {
    const Value* count = arg(args, 2, kwargs, "count");
    if (args.size() < 2) return template_error(line, "replace needs two arguments");
    return Value::string(replace_text(input.str(), args[0].str(), args[1].str(), count ? count->i : -1));
  }
  if (name == "reverse") {
    if (input.kind == Value::kString) return Value::string(std::string(input.s.rbegin(), input.s.rend()));
    List items = input.kind == Value::kList ? *input.list : List{};
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "unique") {
    // Pairwise equality (1 == 1.0 == true, as Python's), so quadratic: bounded apart.
    constexpr size_t kMaxUniqueItems = 4096;
    if (input.kind == Value::kList && input.list->size() > kMaxUniqueItems)
      return limit_error(line, "unique over " + std::to_string(input.list->size()) + " items", "4096", 4096);
    List out;
    if (input.kind == Value::kList)
      for (const Value& v : *input.list)
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(v); })) out.push_back(v);
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value* attr = kwarg(kwargs, "attribute");
    if (input.kind == Value::kList)
      for (const Value& v : *input.list) {
        if (attr) out.push_back(attribute_of(v, attr->str()));
        else if (!args.empty()) {
          COHORT_ASSIGN_OR_RETURN(Value mapped, apply_filter(args[0].str(), v, std::vector<Value>(args.begin() + 1, args.end()), {}, line));
          out.push_back(mapped);
        }
      }
    return Value::make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_items(name, input, args, line);
  if (name == "indent") {
    const Value* width = arg(args, 0, kwargs, "width");
    const Value* first = arg(args, 1, kwargs, "first");
    const int64_t spaces = width && width->kind != Value::kString ? width->i : 4;
    if (spaces < 0 || spaces > 1024) return limit_error(line, "indent width " + std::to_string(spaces), "1024", 1024);
    const std::string pad = width && width->kind == Value::kString ? width->s : std::string(size_t(spaces), ' ');
    std::string s = input.str(), out;
    bool line_start = first && first->truthy();
    for (char c : s) {
      if (out.size() > ChatTemplateLimits::kMaxBytes) break;
      if (line_start && c != '\n') out += pad;
      line_start = false;
      out.push_back(c);
      if (c == '\n') line_start = true;
    }
    return Value::string(out);
  }
  return template_error(line, "filter '" + name + "' is not supported");
}

Result<bool> apply_test(const std::string& name, const Value& v, const std::vector<Value>& args, int line) {
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == Value::kNone;
  if (name == "string") return v.kind == Value::kString;
  if (name == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
  if (name == "integer") return v.kind == Value::kInt;
  if (name == "float") return v.kind == Value::kFloat;
  if (name == "boolean") return v.kind == Value::kBool;
  if (name == "true") return v.kind == Value::kBool && v.b;
  if (name == "false") return v.kind == Value::kBool && !v.b;
  if (name == "mapping") return v.kind == Value::kDict;
  if (name == "sequence") return v.kind == Value::kList || v.kind == Value::kString || v.kind == Value::kDict;
  if (name == "iterable") return v.kind == Value::kList || v.kind == Value::kString || v.kind == Value::kDict;
  if (name == "callable") return v.kind == Value::kFunction;
  if (name == "odd") return v.kind == Value::kInt && v.i % 2 != 0;
  if (name == "even") return v.kind == Value::kInt && v.i % 2 == 0;
  if (name == "divisibleby") return !args.empty() && args[0].i != 0 && v.i % args[0].i == 0;
  if (name == "eq" || name == "equalto" || name == "sameas") return !args.empty() && v.equals(args[0]);
  if (name == "ne") return args.empty() || !v.equals(args[0]);
  if (name == "in") {
    if (args.empty()) return false;
    const Value& c = args[0];
    if (c.kind == Value::kString) return c.s.find(v.str()) != std::string::npos;
    if (c.kind == Value::kDict) return c.find(v.str()) != nullptr;
    if (c.kind == Value::kList) return std::any_of(c.list->begin(), c.list->end(), [&](const Value& x) { return x.equals(v); });
    return false;
  }
  return template_error(line, "test '" + name + "' is not supported");
}

Result<Value> method(const Value& self, const std::string& name, int line) {
  if (self.kind == Value::kString) {
    const std::string s = self.s;
    auto string_fn = [](std::function<Value(const std::string&, const std::vector<Value>&)> f, std::string s) {
      return Value::function([f, s](const std::vector<Value>& args, const Kwargs&) -> Result<Value> { return f(s, args); });
    };
    const auto a0 = [](const std::vector<Value>& a) { return a.empty() ? nullptr : &a[0]; };
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return string_fn([start](const std::string& s, const std::vector<Value>& a) {
        std::vector<std::string> options;
        if (!a.empty() && a[0].kind == Value::kList)
          for (const Value& o : *a[0].list) options.push_back(o.str());
        else if (!a.empty()) options.push_back(a[0].str());
        for (const auto& o : options)
          if (o.size() <= s.size() && (start ? s.compare(0, o.size(), o) : s.compare(s.size() - o.size(), o.size(), o)) == 0)
            return Value::boolean(true);
        return Value::boolean(false);
      }, s);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return string_fn([=](const std::string& s, const std::vector<Value>& a) { return Value::string(py_strip(s, a0(a), l, r)); }, s);
    }
    if (name == "split")
      return string_fn([=](const std::string& s, const std::vector<Value>& a) {
        return py_split(s, a0(a), a.size() > 1 ? a[1].i : -1);
      }, s);
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      const int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
      return string_fn([mode](const std::string& s, const std::vector<Value>&) { return Value::string(case_map(s, mode)); }, s);
    }
    if (name == "replace")
      return string_fn([](const std::string& s, const std::vector<Value>& a) {
        if (a.size() < 2) return Value::string(s);
        return Value::string(replace_text(s, a[0].str(), a[1].str(), a.size() > 2 ? a[2].i : -1));
      }, s);
    if (name == "find" || name == "count")
      return string_fn([name](const std::string& s, const std::vector<Value>& a) {
        const std::string needle = a.empty() ? "" : a[0].str();
        if (name == "find") {
          const size_t at = s.find(needle);
          return Value::integer(at == std::string::npos ? -1 : int64_t(at));
        }
        int64_t n = 0;
        for (size_t at = s.find(needle); !needle.empty() && at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
        return Value::integer(n);
      }, s);
    if (name == "join")
      return string_fn([](const std::string& sep, const std::vector<Value>& a) {
        std::string out;
        if (!a.empty() && a[0].kind == Value::kList)
          for (size_t k = 0; k < a[0].list->size() && out.size() <= ChatTemplateLimits::kMaxBytes; ++k)
            out += (k ? sep : "") + (*a[0].list)[k].str();
        return Value::string(out);
      }, s);
  }
  if (self.kind == Value::kDict) {
    const Value d = self;
    if (name == "items" || name == "keys" || name == "values")
      return Value::function([d, name](const std::vector<Value>&, const Kwargs&) -> Result<Value> {
        List out;
        for (const auto& [k, v] : *d.dict)
          out.push_back(name == "items" ? Value::make_list({Value::string(k), v}) : name == "keys" ? Value::string(k) : v);
        return Value::make_list(std::move(out));
      });
    if (name == "get")
      return Value::function([d](const std::vector<Value>& a, const Kwargs&) -> Result<Value> {
        const Value* v = a.empty() ? nullptr : d.find(a[0].str());
        return v ? *v : (a.size() > 1 ? a[1] : Value::none());
      });
  }
  return template_error(line, "no attribute or method '" + name + "'");
}

Value global_function(const std::string& name) {
  if (name == "range")
    return Value::function([](const std::vector<Value>& a, const Kwargs&) -> Result<Value> {
      int64_t start = 0, stop = 0, step = 1;
      if (a.size() == 1) stop = a[0].i;
      if (a.size() >= 2) start = a[0].i, stop = a[1].i;
      if (a.size() >= 3) step = a[2].i;
      if (step == 0) return invalid_argument("chat template: range() step is zero");
      // Counted before anything is built: range(10**9) is refused, not allocated.
      const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
      const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
      if (count > __int128(ChatTemplateLimits::kMaxItems))
        return invalid_argument("chat template: range() of " + std::to_string(int64_t(std::min<__int128>(count, INT64_MAX))) +
                                " items exceeds ChatTemplateLimits::kMaxItems (" +
                                std::to_string(ChatTemplateLimits::kMaxItems) + ")");
      List out;
      for (__int128 n = 0; n < count; ++n) out.push_back(Value::integer(int64_t(start + n * step)));
      return Value::make_list(std::move(out));
    });
  if (name == "namespace" || name == "dict")
    return Value::function([](const std::vector<Value>& a, const Kwargs& kw) -> Result<Value> {
      Dict d;
      if (!a.empty() && a[0].kind == Value::kDict) d = *a[0].dict;
      for (const auto& [k, v] : kw) d.emplace_back(k, v);
      return Value::make_dict(std::move(d));
    });
  if (name == "raise_exception")
    return Value::function([](const std::vector<Value>& a, const Kwargs&) -> Result<Value> {
      return invalid_argument("chat template raised: " + (a.empty() ? std::string("(no message)") : a[0].str()));
    });
  if (name == "strftime_now")
    return Value::function([](const std::vector<Value>& a, const Kwargs&) -> Result<Value> {
      char buf[128] = {0};
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      std::strftime(buf, sizeof(buf), a.empty() ? "%d %b %Y" : a[0].str().c_str(), &tm);
      return Value::string(buf);
    });
  return Value();
}

}  // namespace cohort::text::jinja
