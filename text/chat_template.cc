// Chat templates, rendered: a tree walk over the parsed template with
// jinja2's scoping (a for loop's body has its own scope; `namespace()`
// objects carry values out of it), `loop` variables, macros, and
// `{% generation %}` spans recorded for assistant masks.
#include "text/chat_template.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "text/chat_template_ast.h"

namespace cohort::text {
namespace {

using jinja::Expr;
using jinja::ExprPtr;
using jinja::Value;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = Value::from_json(it.value());
  }

  Result<Flow> run(const std::vector<NodePtr>& nodes) {
    for (const NodePtr& n : nodes) {
      COHORT_ASSIGN_OR_RETURN(Flow f, run_one(*n));
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }
  RenderedChat result() { return RenderedChat{std::move(out_), std::move(spans_)}; }

 private:
  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return it->second;
    return jinja::global_function(name);
  }

  // One unit of ChatTemplateLimits::kMaxSteps.
  // The clock is read every 16 steps: no step costs more than a pass over
  // one value within kMaxBytes or kMaxItems, so the deadline holds to a few
  // milliseconds.
  Status step(int line) {
    if (++steps_ > ChatTemplateLimits::kMaxSteps)
      return jinja::limit_error(line, "rendering", "ChatTemplateLimits::kMaxSteps", ChatTemplateLimits::kMaxSteps);
    if (steps_ % 16 == 0 && std::chrono::steady_clock::now() > deadline_)
      return jinja::limit_error(line, "rendering time", "ChatTemplateLimits::kMaxMilliseconds",
                                ChatTemplateLimits::kMaxMilliseconds);
    return Status::ok();
  }
  Result<Flow> wrote(int line) {
    if (out_.size() <= ChatTemplateLimits::kMaxBytes) return Flow::kNormal;
    return jinja::limit_error(line, "the output", "ChatTemplateLimits::kMaxBytes",
                              int64_t(ChatTemplateLimits::kMaxBytes));
  }

  // Statements nest (blocks, and macro bodies calling macros) as
  // expressions do: both count against one recursion bound.
  Result<Flow> run_one(const ChatTemplateNode& n) {
    COHORT_RETURN_IF_ERROR(step(n.line));
    if (depth_ >= kMaxRecursion)
      return jinja::limit_error(n.line, "recursion", "4 * ChatTemplateLimits::kMaxNesting", kMaxRecursion);
    ++depth_;
    Result<Flow> flow = run_statement(n);
    --depth_;
    return flow;
  }

  Result<Flow> run_statement(const ChatTemplateNode& n) {
    switch (n.kind) {
      case ChatTemplateNode::kText: out_ += n.text; return wrote(n.line);
      case ChatTemplateNode::kOutput: {
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        out_ += v.str();
        return wrote(n.line);
      }
      case ChatTemplateNode::kIf:
        for (const auto& [cond, body] : n.branches) {
          bool take = true;
          if (cond) {
            COHORT_ASSIGN_OR_RETURN(Value c, eval(*cond));
            take = c.truthy();
          }
          if (take) return run(body);
        }
        return Flow::kNormal;
      case ChatTemplateNode::kFor: return run_for(n);
      case ChatTemplateNode::kSet: {
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        return assign(n, v);
      }
      case ChatTemplateNode::kSetBlock: {
        std::string saved;
        saved.swap(out_);
        COHORT_RETURN_IF_ERROR(status_of(run(n.body)));
        Value v = Value::string(out_);
        out_ = std::move(saved);
        return assign(n, v);
      }
      case ChatTemplateNode::kMacro: scopes_.back()[n.targets[0]] = make_macro(n); return Flow::kNormal;
      case ChatTemplateNode::kBreak: return Flow::kBreak;
      case ChatTemplateNode::kContinue: return Flow::kContinue;
      case ChatTemplateNode::kGeneration: {
        const size_t begin = out_.size();
        COHORT_ASSIGN_OR_RETURN(Flow f, run(n.body));
        spans_.emplace_back(begin, out_.size());
        return f;
      }
      case ChatTemplateNode::kBody: return run(n.body);
    }
    return Flow::kNormal;
  }

  // The nesting of `v` as it is now, walked (each value a step) up to one
  // level past the limit. Namespaces are the one mutable container, so a
  // value holding one may be deeper than its recorded depth; walking what
  // goes into a namespace keeps every value's real nesting bounded.
  // A value that reaches `target` (the namespace being assigned into) would
  // make a cycle, and is refused.
  Result<int> walked_depth(const Value& v, int level, const jinja::Dict* target, int line) {
    COHORT_RETURN_IF_ERROR(step(line));
    if (level > ChatTemplateLimits::kMaxNesting) return level;
    if (v.kind == Value::kDict && v.dict.get() == target)
      return jinja::limit_error(line, "a namespace holding itself", "ChatTemplateLimits::kMaxNesting",
                                ChatTemplateLimits::kMaxNesting);
    int deepest = level;
    if (v.kind == Value::kList)
      for (const Value& item : *v.list) {
        COHORT_ASSIGN_OR_RETURN(int d, walked_depth(item, level + 1, target, line));
        deepest = std::max(deepest, d);
        if (deepest > ChatTemplateLimits::kMaxNesting) break;
      }
    if (v.kind == Value::kDict)
      for (const auto& [_, item] : *v.dict) {
        COHORT_ASSIGN_OR_RETURN(int d, walked_depth(item, level + 1, target, line));
        deepest = std::max(deepest, d);
        if (deepest > ChatTemplateLimits::kMaxNesting) break;
      }
    return deepest;
  }

  Result<Flow> assign(const ChatTemplateNode& n, const Value& v) {
    const std::string& target = n.targets[0];
    if (auto dot = target.find('.'); dot != std::string::npos) {
      Value ns = lookup(target.substr(0, dot));
      if (ns.kind != Value::kDict) return jinja::template_error(n.line, target.substr(0, dot) + " is not a namespace");
      if (v.kind == Value::kList || v.kind == Value::kDict) {
        COHORT_ASSIGN_OR_RETURN(int depth, walked_depth(v, 1, ns.dict.get(), n.line));
        if (depth >= ChatTemplateLimits::kMaxNesting)
          return jinja::limit_error(n.line, "value nesting", "ChatTemplateLimits::kMaxNesting",
                                    ChatTemplateLimits::kMaxNesting);
      }
      const std::string attr = target.substr(dot + 1);
      for (auto& [k, old] : *ns.dict)
        if (k == attr) return old = v, Flow::kNormal;
      ns.dict->emplace_back(attr, v);
      return Flow::kNormal;
    }
    if (n.targets.size() == 1) {
      scopes_.back()[target] = v;
      return Flow::kNormal;
    }
    if (v.kind != Value::kList || v.list->size() != n.targets.size())
      return jinja::template_error(n.line, "cannot unpack into " + std::to_string(n.targets.size()) + " names");
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = (*v.list)[k];
    return Flow::kNormal;
  }

  Result<std::vector<Value>> items_of(const Value& v, int line) {
    switch (v.kind) {
      case Value::kList: return *v.list;
      case Value::kDict: {
        std::vector<Value> keys;
        for (const auto& [k, _] : *v.dict) keys.push_back(Value::string(k));
        return keys;
      }
      case Value::kString: {
        if (v.s.size() > ChatTemplateLimits::kMaxItems)
          return jinja::limit_error(line, "iterating over " + std::to_string(v.s.size()) + " characters",
                                    "ChatTemplateLimits::kMaxItems", int64_t(ChatTemplateLimits::kMaxItems));
        std::vector<Value> chars;
        for (size_t i = 0; i < v.s.size();) {
          const auto c = static_cast<unsigned char>(v.s[i]);
          size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
          chars.push_back(Value::string(v.s.substr(i, len)));
          i += len;
        }
        return chars;
      }
      case Value::kUndefined:
      case Value::kNone: return std::vector<Value>{};
      default: return jinja::template_error(line, "cannot iterate over " + v.repr());
    }
  }

  Result<Flow> run_for(const ChatTemplateNode& n) {
    COHORT_ASSIGN_OR_RETURN(Value iterable, eval(*n.expr));
    COHORT_ASSIGN_OR_RETURN(std::vector<Value> all, items_of(iterable, n.line));
    std::vector<Value> items;
    for (const Value& item : all) {
      if (n.filter) {
        scopes_.emplace_back();
        bind_targets(n, item);
        auto keep = eval(*n.filter);
        scopes_.pop_back();
        if (!keep) return keep.status();
        if (!keep->truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) return run(n.else_body);
    const int64_t length = int64_t(items.size());
    for (int64_t k = 0; k < length; ++k) {
      COHORT_RETURN_IF_ERROR(step(n.line));  // an empty body still costs its iterations
      scopes_.emplace_back();
      bind_targets(n, items[size_t(k)]);
      jinja::Dict loop{{"index", Value::integer(k + 1)},        {"index0", Value::integer(k)},
                       {"revindex", Value::integer(length - k)}, {"revindex0", Value::integer(length - k - 1)},
                       {"first", Value::boolean(k == 0)},         {"last", Value::boolean(k == length - 1)},
                       {"length", Value::integer(length)},
                       {"previtem", k > 0 ? items[size_t(k - 1)] : Value()},
                       {"nextitem", k + 1 < length ? items[size_t(k + 1)] : Value()}};
      scopes_.back()["loop"] = Value::make_dict(std::move(loop));
      auto flow = run(n.body);
      scopes_.pop_back();
      if (!flow) return flow.status();
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind_targets(const ChatTemplateNode& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    for (size_t k = 0; k < n.targets.size(); ++k)
      scopes_.back()[n.targets[k]] =
          item.kind == Value::kList && k < item.list->size() ? (*item.list)[k] : Value();
  }

  Value make_macro(const ChatTemplateNode& n) {
    const ChatTemplateNode* def = &n;
    return Value::function([this, def](const std::vector<Value>& args, const jinja::Kwargs& kwargs) -> Result<Value> {
      if (call_depth_ >= ChatTemplateLimits::kMaxCallDepth)
        return jinja::limit_error(def->line, "macro calls", "ChatTemplateLimits::kMaxCallDepth",
                                  ChatTemplateLimits::kMaxCallDepth);
      ++call_depth_;
      struct Return {
        int* depth;
        ~Return() { --*depth; }
      } on_return{&call_depth_};
      scopes_.emplace_back();
      for (size_t k = 0; k < def->params.size(); ++k) {
        const auto& [name, fallback] = def->params[k];
        Value v;
        if (k < args.size()) v = args[k];
        for (const auto& [key, kv] : kwargs)
          if (key == name) v = kv;
        if (!v.defined() && fallback) {
          auto d = eval(*fallback);
          if (!d) return scopes_.pop_back(), d.status();
          v = *d;
        }
        scopes_.back()[name] = v;
      }
      std::string saved;
      saved.swap(out_);
      auto flow = run(def->body);
      std::string text;
      text.swap(out_);
      out_ = std::move(saved);
      scopes_.pop_back();
      if (!flow) return flow.status();
      return Value::string(text);
    });
  }

  // Every expression goes through eval: a step, bounded recursion, and a
  // result within the size limits.
  Result<Value> eval(const Expr& e) {
    COHORT_RETURN_IF_ERROR(step(e.line));
    if (depth_ >= kMaxRecursion)
      return jinja::limit_error(e.line, "recursion", "4 * ChatTemplateLimits::kMaxNesting", kMaxRecursion);
    ++depth_;
    Result<Value> v = eval_expr(e);
    --depth_;
    if (!v) return v;
    if (v->kind == Value::kString) COHORT_RETURN_IF_ERROR(jinja::check_bytes(v->s.size(), e.line));
    const size_t items = v->kind == Value::kList ? v->list->size() : v->kind == Value::kDict ? v->dict->size() : 0;
    if (items > ChatTemplateLimits::kMaxItems)
      return jinja::limit_error(e.line, "a container of " + std::to_string(items) + " items",
                                "ChatTemplateLimits::kMaxItems", int64_t(ChatTemplateLimits::kMaxItems));
    if (v->depth > ChatTemplateLimits::kMaxNesting)
      return jinja::limit_error(e.line, "value nesting", "ChatTemplateLimits::kMaxNesting",
                                ChatTemplateLimits::kMaxNesting);
    return v;
  }
  Result<Value> eval_expr(const Expr& e);
  Result<Value> eval_binary(const Expr& e);

  std::vector<std::map<std::string, Value>> scopes_;
  int64_t steps_ = 0;
  const std::chrono::steady_clock::time_point deadline_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(ChatTemplateLimits::kMaxMilliseconds);
  static constexpr int kMaxRecursion = 4 * ChatTemplateLimits::kMaxNesting;
  int depth_ = 0;  // run_one and eval frames on the stack
  int call_depth_ = 0;
  std::string out_;
  std::vector<std::pair<size_t, size_t>> spans_;
};

Result<Value> index_value(const Value& base, const Value& key, int line) {
  if (base.kind == Value::kDict) {
    const Value* v = base.find(key.str());
    return v ? *v : Value();
  }
  if ((base.kind == Value::kList || base.kind == Value::kString) && key.kind == Value::kInt) {
    const int64_t n = base.kind == Value::kList ? int64_t(base.list->size()) : int64_t(base.s.size());
    int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value();
    return base.kind == Value::kList ? (*base.list)[size_t(k)] : Value::string(base.s.substr(size_t(k), 1));
  }
  if (base.kind == Value::kUndefined) return jinja::template_error(line, "indexing an undefined value");
  return Value();
}

Result<Value> slice_value(const Value& base, const Value& a, const Value& b, const Value& c, int line) {
  const int64_t step = c.defined() && c.kind != Value::kNone ? c.i : 1;
  if (step == 0) return jinja::template_error(line, "slice step is zero");
  std::vector<Value> items;
  if (base.kind == Value::kList) items = *base.list;
  else if (base.kind == Value::kString && base.s.size() > ChatTemplateLimits::kMaxItems)
    return jinja::limit_error(line, "slicing " + std::to_string(base.s.size()) + " characters",
                              "ChatTemplateLimits::kMaxItems", int64_t(ChatTemplateLimits::kMaxItems));
  else if (base.kind == Value::kString)
    for (char ch : base.s) items.push_back(Value::string(std::string(1, ch)));
  else return jinja::template_error(line, "cannot slice " + base.repr());
  const int64_t n = int64_t(items.size());
  auto clamp = [&](const Value& v, int64_t def) {
    if (!v.defined() || v.kind == Value::kNone) return def;
    int64_t x = v.i < 0 ? v.i + n : v.i;
    return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(a, step > 0 ? 0 : n - 1), stop = clamp(b, step > 0 ? n : -1);
  std::vector<Value> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
    out.push_back(items[size_t(k)]);
    if (__builtin_add_overflow(k, step, &k)) break;  // a step past the end
  }
  if (base.kind == Value::kList) return Value::make_list(std::move(out));
  std::string s;
  for (const Value& v : out) s += v.s;
  return Value::string(s);
}

Result<Value> Renderer::eval_expr(const Expr& e) {
  switch (e.kind) {
    case Expr::kLiteral: return e.literal;
    case Expr::kName: return lookup(e.name);
    case Expr::kList: {
      jinja::List items;
      for (const ExprPtr& a : e.args) {
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*a));
        items.push_back(v);
      }
      return Value::make_list(std::move(items));
    }
    case Expr::kDict: {
      jinja::Dict items;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        COHORT_ASSIGN_OR_RETURN(Value key, eval(*e.args[k]));
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*e.args[k + 1]));
        items.emplace_back(key.str(), v);
      }
      return Value::make_dict(std::move(items));
    }
    case Expr::kAttr: {
      COHORT_ASSIGN_OR_RETURN(Value base, eval(*e.args[0]));
      if (base.kind == Value::kDict) {
        if (const Value* v = base.find(e.name)) return *v;
      }
      if (base.kind == Value::kUndefined) return jinja::template_error(e.line, "'" + e.name + "' of an undefined value");
      auto m = jinja::method(base, e.name, e.line);
      return m ? *m : Value();
    }
    case Expr::kIndex: {
      COHORT_ASSIGN_OR_RETURN(Value base, eval(*e.args[0]));
      COHORT_ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
      return index_value(base, key, e.line);
    }
    case Expr::kSlice: {
      COHORT_ASSIGN_OR_RETURN(Value base, eval(*e.args[0]));
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        if (e.args[size_t(k) + 1]) { COHORT_ASSIGN_OR_RETURN(parts[k], eval(*e.args[size_t(k) + 1])); }
      return slice_value(base, parts[0], parts[1], parts[2], e.line);
    }
    case Expr::kCall:
    case Expr::kFilter:
    case Expr::kTest: {
      COHORT_ASSIGN_OR_RETURN(Value target, eval(*e.args[0]));
      std::vector<Value> args;
      jinja::Kwargs kwargs;
      for (size_t k = 1; k < e.args.size(); ++k) {
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*e.args[k]));
        args.push_back(v);
      }
      for (const auto& [key, ke] : e.kwargs) {
        COHORT_ASSIGN_OR_RETURN(Value v, eval(*ke));
        kwargs.emplace_back(key, v);
      }
      if (e.kind == Expr::kFilter) return jinja::apply_filter(e.name, target, args, kwargs, e.line);
      if (e.kind == Expr::kTest) {
        COHORT_ASSIGN_OR_RETURN(bool t, jinja::apply_test(e.name, target, args, e.line));
        return Value::boolean(t != e.negated);
      }
      if (target.kind != Value::kFunction) return jinja::template_error(e.line, "calling something that is not a function");
      return (*target.fn)(args, kwargs);
    }
    case Expr::kUnary: {
      COHORT_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.kind == Value::kInt && v.i == INT64_MIN) return jinja::template_error(e.line, "integer overflow in -");
      if (v.kind == Value::kInt) return Value::integer(-v.i);
      return Value::number(-v.as_double());
    }
    case Expr::kConditional: {
      COHORT_ASSIGN_OR_RETURN(Value c, eval(*e.args[0]));
      return eval(*e.args[c.truthy() ? 1 : 2]);
    }
    case Expr::kBinary: return eval_binary(e);
  }
  return Value();
}

Result<Value> Renderer::eval_binary(const Expr& e) {
  COHORT_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
  if (e.name == "and") return a.truthy() ? eval(*e.args[1]) : a;
  if (e.name == "or") return a.truthy() ? a : eval(*e.args[1]);
  COHORT_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
  const std::string& op = e.name;
  if (op == "~") {
    // Strings join in place (no str() copies): a template that doubles a
    // string reaches kMaxBytes in a few steps, each copy of which costs.
    std::string joined = a.kind == Value::kString ? std::move(a.s) : a.str();
    const std::string right_text = b.kind == Value::kString ? std::string() : b.str();
    const std::string& right = b.kind == Value::kString ? b.s : right_text;
    COHORT_RETURN_IF_ERROR(jinja::check_bytes(joined.size() + right.size(), e.line));
    joined.reserve(joined.size() + right.size());
    joined += right;
    return Value::string(std::move(joined));
  }
  if (op == "==") return Value::boolean(a.equals(b));
  if (op == "!=") return Value::boolean(!a.equals(b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.kind == Value::kString) found = b.s.find(a.str()) != std::string::npos;
    else if (b.kind == Value::kDict) found = b.find(a.str()) != nullptr;
    else if (b.kind == Value::kList)
      for (const Value& item : *b.list) found = found || item.equals(a);
    return Value::boolean(found != (op == "not in"));
  }
  if (op == "+" && a.kind == Value::kString && b.kind == Value::kString) {
    COHORT_RETURN_IF_ERROR(jinja::check_bytes(a.s.size() + b.s.size(), e.line));
    return Value::string(a.s + b.s);
  }
  if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
    jinja::List items = *a.list;
    items.insert(items.end(), b.list->begin(), b.list->end());
    return Value::make_list(std::move(items));
  }
  if (op == "*" && a.kind == Value::kString && b.kind == Value::kInt) {
    // Sized before it is built: 'x' * 10**10 is refused, not allocated.
    if (b.i > 0 && !a.s.empty())
      COHORT_RETURN_IF_ERROR(jinja::check_bytes(
          b.i > int64_t(ChatTemplateLimits::kMaxBytes) ? ChatTemplateLimits::kMaxBytes + 1 : a.s.size() * size_t(b.i),
          e.line));
    if (a.s.empty() || b.i <= 0) return Value::string("");  // '' * 10**12 is '' at once, not a loop
    std::string s;
    s.reserve(a.s.size() * size_t(b.i));
    for (int64_t k = 0; k < b.i; ++k) s += a.s;
    return Value::string(s);
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int cmp = 0;
    if (a.kind == Value::kString && b.kind == Value::kString) cmp = a.s.compare(b.s);
    else if (a.is_number() && b.is_number()) cmp = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
    else return jinja::template_error(e.line, "cannot compare " + a.repr() + " and " + b.repr());
    return Value::boolean(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
  }
  if (!a.is_number() || !b.is_number())
    return jinja::template_error(e.line, "unsupported operands for " + op + ": " + a.repr() + " and " + b.repr());
  const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
  const double x = a.as_double(), y = b.as_double();
  // Python's integers do not overflow; a template's past 64 bits is refused
  // (signed overflow in C++ is undefined, and 10**10**10 is an attack).
  const int64_t i = a.kind == Value::kBool ? int64_t(a.b) : a.i, j = b.kind == Value::kBool ? int64_t(b.b) : b.i;
  const auto overflow = [&] { return jinja::template_error(e.line, "integer overflow in " + op); };
  if (op == "/") {
    if (y == 0) return jinja::template_error(e.line, "division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return jinja::template_error(e.line, "division by zero");
    if (ints) {
      if (i == INT64_MIN && j == -1) return overflow();
      int64_t q = i / j, r = i % j;
      if (r != 0 && ((r < 0) != (j < 0))) --q, r += j;  // Python floors
      return Value::integer(op == "//" ? q : r);
    }
    return Value::number(op == "//" ? std::floor(x / y) : x - std::floor(x / y) * y);
  }
  if (op == "**") {
    if (!ints || j < 0) return Value::number(std::pow(x, y));
    int64_t result = 1, base = i;
    for (int64_t k = j; k > 0; k >>= 1) {  // by squaring, every product checked
      if ((k & 1) && __builtin_mul_overflow(result, base, &result)) return overflow();
      if (k > 1 && __builtin_mul_overflow(base, base, &base)) return overflow();
    }
    return Value::integer(result);
  }
  if (ints) {
    int64_t r = 0;
    const bool over = op == "+" ? __builtin_add_overflow(i, j, &r)
                      : op == "-" ? __builtin_sub_overflow(i, j, &r) : __builtin_mul_overflow(i, j, &r);
    if (over) return overflow();
    return Value::integer(r);
  }
  return Value::number(op == "+" ? x + y : op == "-" ? x - y : x * y);
}


}  // namespace

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  COHORT_ASSIGN_OR_RETURN(t.root_, jinja::parse_template(source));
  return t;
}

Result<RenderedChat> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return invalid_argument("chat template context must be an object");
  // Messages and tools may nest arbitrarily; turning them into values
  // recurses, so their depth is measured first, without recursion.
  std::vector<std::pair<const nlohmann::ordered_json*, int>> pending{{&context, 1}};
  while (!pending.empty()) {
    auto [j, level] = pending.back();
    pending.pop_back();
    if (level > ChatTemplateLimits::kMaxNesting)
      return jinja::limit_error(0, "the nesting of the messages and tools", "ChatTemplateLimits::kMaxNesting",
                                ChatTemplateLimits::kMaxNesting);
    if (j->is_structured())
      for (const auto& child : *j) pending.emplace_back(&child, level + 1);
  }
  Renderer r(context);
  COHORT_RETURN_IF_ERROR(status_of(r.run(root_->body)));
  return r.result();
}

}  // namespace cohort::text
