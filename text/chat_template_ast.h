// Private to text/: the values a chat template computes with, and the
// parsed template (expressions and statements), for chat_template*.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/chat_template.h"

namespace cohort::text::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Result<Value>(const std::vector<Value>& args, const Kwargs& kwargs)>;

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // also a namespace() object (mutable through set)
  std::shared_ptr<Function> fn;
  // Containers nested in this one, counted when it was made (0 for scalars);
  // ChatTemplateLimits::kMaxNesting bounds it so destruction and printing
  // never recurse deeply.
  int depth = 0;

  static Value none() { Value v; v.kind = kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value make_list(List x = {});
  static Value make_dict(Dict x = {});
  static Value function(Function f) { Value v; v.kind = kFunction; v.fn = std::make_shared<Function>(std::move(f)); return v; }
  static Value from_json(const nlohmann::ordered_json& j);

  bool defined() const { return kind != kUndefined; }
  bool truthy() const;
  bool is_number() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double as_double() const { return kind == kFloat ? f : kind == kBool ? double(b) : double(i); }
  const Value* find(const std::string& key) const;  // dict key, or null
  // Printing and comparing stop descending past kMaxNesting levels ("..."),
  // which only a namespace assigned into itself reaches.
  std::string str() const;   // Python str(): what {{ }} prints
  std::string repr(int level = 0) const;  // Python repr(), for containers
  std::string to_json(int indent, int level = 0) const;  // json.dumps(ensure_ascii=False)
  bool equals(const Value& other, int level = 0) const;
};

// Expressions.
struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;
struct Expr {
  enum Kind {
    kLiteral, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary,
    kConditional
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;                 // variable, attribute, filter, test or operator
  std::vector<ExprPtr> args;        // operands, list items, call arguments, dict keys/values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;             // `is not`
  int depth = 1;                    // levels of expressions below and including this one
};

// Statements.
struct ChatTemplateNodeList;
}  // namespace cohort::text::jinja

namespace cohort::text {
struct ChatTemplateNode {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kGeneration, kBody };
  Kind kind = kBody;
  int line = 0;
  std::string text;                                         // kText
  jinja::ExprPtr expr;                                      // output, set value, for iterable
  std::vector<std::pair<jinja::ExprPtr, std::vector<std::shared_ptr<const ChatTemplateNode>>>> branches;  // if
  std::vector<std::string> targets;                         // for / set names ("ns.attr" for set)
  jinja::ExprPtr filter;                                    // for ... if cond
  std::vector<std::shared_ptr<const ChatTemplateNode>> body, else_body;
  std::vector<std::pair<std::string, jinja::ExprPtr>> params;  // macro parameters and defaults
};
using NodePtr = std::shared_ptr<const ChatTemplateNode>;

namespace jinja {
Result<NodePtr> parse_template(const std::string& source);
}  // namespace jinja
}  // namespace cohort::text

namespace cohort::text::jinja {
// Built-ins (chat_template_builtins.cc). `line` is for error messages.
Result<Value> apply_filter(const std::string& name, const Value& input, const std::vector<Value>& args,
                           const Kwargs& kwargs, int line);
Result<bool> apply_test(const std::string& name, const Value& input, const std::vector<Value>& args, int line);
// A method of a string, dict or list (`s.startswith`, `d.items`), bound to it.
Result<Value> method(const Value& self, const std::string& name, int line);
Value global_function(const std::string& name);  // range, namespace, raise_exception, ...
Status template_error(int line, const std::string& what);
// The error for a ChatTemplateLimits bound: names the limit and its value.
Status limit_error(int line, const std::string& what, const std::string& limit, int64_t value);
// Refuses a string of `bytes` (before it is built) past kMaxBytes.
Status check_bytes(size_t bytes, int line);
}  // namespace cohort::text::jinja
