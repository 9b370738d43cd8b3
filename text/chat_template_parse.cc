// Chat templates, parsed: from the tags and tokens chat_template_lex.h cuts
// the text into, expressions are parsed with Jinja's precedence (or < and <
// not < comparisons < + - < ~ < * / // % < ** < unary < postfix, filters
// and tests), and statements nest into a tree.
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "text/chat_template_ast.h"
#include "text/chat_template_lex.h"

namespace cohort::text::jinja {
namespace {

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}

  Result<ExprPtr> parse_all() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr e, expression());
    if (peek().kind != Tok::kEnd) return error_at(line_, "unexpected '" + peek().text + "'");
    return e;
  }
  Result<ExprPtr> expression() { return conditional(); }
  // A for loop's iterable: jinja2 reads `for x in xs if cond` as a filter,
  // not as the conditional expression `xs if cond`.
  Result<ExprPtr> iterable() {
    Nested nested(&nesting_);
    COHORT_RETURN_IF_ERROR(check_nesting());
    return binary_or();
  }
  const Tok& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool accept_op(const char* op) {
    if (peek().kind == Tok::kOp && peek().text == op) return ++p_, true;
    return false;
  }
  bool accept_name(const char* name) {
    if (peek().kind == Tok::kName && peek().text == name) return ++p_, true;
    return false;
  }
  Status expect_op(const char* op) {
    if (accept_op(op)) return Status::ok();
    return error_at(line_, std::string("expected '") + op + "', found '" + peek().text + "'");
  }
  Result<std::string> name() {
    if (peek().kind != Tok::kName) return error_at(line_, "expected a name, found '" + peek().text + "'");
    return t_[p_++].text;
  }
  bool at_end() const { return peek().kind == Tok::kEnd; }

 private:
  // Counts the parser's own recursion (parentheses, `not`, unary signs,
  // chained conditionals) while it is inside one of them.
  struct Nested {
    explicit Nested(int* level) : level_(level) { ++*level_; }
    ~Nested() { --*level_; }
    int* level_;
  };
  Status check_nesting() const {
    if (nesting_ > ChatTemplateLimits::kMaxNesting || too_deep_)
      return limit_error(line_, "expression nesting", "ChatTemplateLimits::kMaxNesting",
                         ChatTemplateLimits::kMaxNesting);
    return Status::ok();
  }

  ExprPtr node(Expr::Kind kind, std::string name, std::vector<ExprPtr> args) const {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line_;
    e->name = std::move(name);
    e->args = std::move(args);
    for (const ExprPtr& a : e->args)
      if (a) e->depth = std::max(e->depth, a->depth + 1);
    for (const auto& [_, a] : e->kwargs)
      if (a) e->depth = std::max(e->depth, a->depth + 1);
    // Chains (a + b + c ...) deepen the tree without recursing here; the
    // next operand's unary() refuses once this is set.
    if (e->depth > ChatTemplateLimits::kMaxNesting) too_deep_ = true;
    return e;
  }

  Result<ExprPtr> conditional() {
    Nested nested(&nesting_);
    COHORT_RETURN_IF_ERROR(check_nesting());
    COHORT_ASSIGN_OR_RETURN(ExprPtr value, binary_or());
    while (accept_name("if")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr cond, binary_or());
      ExprPtr otherwise;
      if (accept_name("else")) { COHORT_ASSIGN_OR_RETURN(otherwise, conditional()); }
      else otherwise = node(Expr::kLiteral, "", {});
      value = node(Expr::kConditional, "", {cond, value, otherwise});
    }
    return value;
  }
  Result<ExprPtr> binary_or() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, binary_and());
    while (accept_name("or")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, binary_and());
      left = node(Expr::kBinary, "or", {left, right});
    }
    return left;
  }
  Result<ExprPtr> binary_and() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, unary_not());
    while (accept_name("and")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, unary_not());
      left = node(Expr::kBinary, "and", {left, right});
    }
    return left;
  }
  Result<ExprPtr> unary_not() {
    Nested nested(&nesting_);
    COHORT_RETURN_IF_ERROR(check_nesting());
    if (accept_name("not")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr e, unary_not());
      return node(Expr::kUnary, "not", {e});
    }
    return compare();
  }
  Result<ExprPtr> compare() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, math1());
    for (;;) {
      std::string op;
      if (peek().kind == Tok::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                       peek().text == ">" || peek().text == "<=" || peek().text == ">="))
        op = t_[p_++].text;
      else if (accept_name("in")) op = "in";
      else if (peek().kind == Tok::kName && peek().text == "not" && peek(1).kind == Tok::kName && peek(1).text == "in")
        p_ += 2, op = "not in";
      else break;
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, math1());
      left = node(Expr::kBinary, op, {left, right});
    }
    return left;
  }
  Result<ExprPtr> math1() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, concat());
    while (peek().kind == Tok::kOp && (peek().text == "+" || peek().text == "-")) {
      std::string op = t_[p_++].text;
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, concat());
      left = node(Expr::kBinary, op, {left, right});
    }
    return left;
  }
  Result<ExprPtr> concat() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, math2());
    while (accept_op("~")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, math2());
      left = node(Expr::kBinary, "~", {left, right});
    }
    return left;
  }
  Result<ExprPtr> math2() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, power());
    while (peek().kind == Tok::kOp && (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
      std::string op = t_[p_++].text;
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, power());
      left = node(Expr::kBinary, op, {left, right});
    }
    return left;
  }
  Result<ExprPtr> power() {
    COHORT_ASSIGN_OR_RETURN(ExprPtr left, unary(true));
    while (accept_op("**")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr right, unary(true));
      left = node(Expr::kBinary, "**", {left, right});
    }
    return left;
  }
  Result<ExprPtr> unary(bool with_filter) {
    Nested nested(&nesting_);
    COHORT_RETURN_IF_ERROR(check_nesting());
    ExprPtr e;
    if (accept_op("-")) {
      COHORT_ASSIGN_OR_RETURN(ExprPtr operand, unary(false));
      e = node(Expr::kUnary, "-", {operand});
    } else if (accept_op("+")) {
      COHORT_ASSIGN_OR_RETURN(e, unary(false));
    } else {
      COHORT_ASSIGN_OR_RETURN(e, primary());
      COHORT_ASSIGN_OR_RETURN(e, postfix(e));
    }
    if (with_filter) { COHORT_ASSIGN_OR_RETURN(e, filters_and_tests(e)); }
    return e;
  }
  Status call_args(Expr& call) {
    while (!accept_op(")")) {
      if (!call.args.empty() || !call.kwargs.empty()) COHORT_RETURN_IF_ERROR(expect_op(","));
      if (accept_op(")")) break;
      if (peek().kind == Tok::kName && peek(1).kind == Tok::kOp && peek(1).text == "=") {
        std::string key = t_[p_].text;
        p_ += 2;
        COHORT_ASSIGN_OR_RETURN(ExprPtr v, expression());
        call.kwargs.emplace_back(key, v);
      } else {
        COHORT_ASSIGN_OR_RETURN(ExprPtr v, expression());
        call.args.push_back(v);
      }
    }
    return Status::ok();
  }
  Result<ExprPtr> postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        COHORT_ASSIGN_OR_RETURN(std::string attr, name());
        e = node(Expr::kAttr, attr, {e});
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!(peek().kind == Tok::kOp && (peek().text == ":" || peek().text == "]")))
            { COHORT_ASSIGN_OR_RETURN(parts[k], expression()); }
          if (k < 2 && accept_op(":")) slice = true;
          else break;
        }
        COHORT_RETURN_IF_ERROR(expect_op("]"));
        if (!slice && !parts[0]) return error_at(line_, "an index needs a value: x[] is not an expression");
        auto n = std::make_shared<Expr>();
        n->kind = slice ? Expr::kSlice : Expr::kIndex;
        n->line = line_;
        n->args = {e, parts[0], parts[1], parts[2]};
        e = n;
      } else if (accept_op("(")) {
        auto call = std::make_shared<Expr>();
        call->kind = Expr::kCall;
        call->line = line_;
        COHORT_RETURN_IF_ERROR(call_args(*call));
        call->args.insert(call->args.begin(), e);
        e = call;
      } else {
        return e;
      }
    }
  }
  Result<ExprPtr> filters_and_tests(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        COHORT_ASSIGN_OR_RETURN(std::string f, name());
        auto n = std::make_shared<Expr>();
        n->kind = Expr::kFilter;
        n->line = line_;
        n->name = f;
        if (accept_op("(")) COHORT_RETURN_IF_ERROR(call_args(*n));
        n->args.insert(n->args.begin(), e);
        e = n;
      } else if (accept_name("is")) {
        auto n = std::make_shared<Expr>();
        n->kind = Expr::kTest;
        n->line = line_;
        n->negated = accept_name("not");
        COHORT_ASSIGN_OR_RETURN(n->name, name());
        if (accept_op("(")) COHORT_RETURN_IF_ERROR(call_args(*n));
        else if (peek().kind == Tok::kString || peek().kind == Tok::kInt || peek().kind == Tok::kFloat) {
          COHORT_ASSIGN_OR_RETURN(ExprPtr arg, primary());
          n->args.push_back(arg);
        }
        n->args.insert(n->args.begin(), e);
        e = n;
      } else {
        return e;
      }
    }
  }
  Result<ExprPtr> primary() {
    const Tok tok = peek();
    auto lit = [&](Value v) {
      auto n = std::make_shared<Expr>();
      n->kind = Expr::kLiteral;
      n->line = line_;
      n->literal = std::move(v);
      return ExprPtr(n);
    };
    switch (tok.kind) {
      case Tok::kString: {
        ++p_;
        std::string s = tok.text;
        while (peek().kind == Tok::kString) s += t_[p_++].text;  // adjacent literals join
        return lit(Value::string(s));
      }
      case Tok::kInt: {
        ++p_;
        errno = 0;
        const long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return error_at(line_, "integer " + tok.text.substr(0, 40) + " is beyond 64 bits");
        return lit(Value::integer(v));
      }
      case Tok::kFloat: ++p_; return lit(Value::number(std::strtod(tok.text.c_str(), nullptr)));  // inf past range
      case Tok::kName: {
        ++p_;
        if (tok.text == "true" || tok.text == "True") return lit(Value::boolean(true));
        if (tok.text == "false" || tok.text == "False") return lit(Value::boolean(false));
        if (tok.text == "none" || tok.text == "None") return lit(Value::none());
        return node(Expr::kName, tok.text, {});
      }
      case Tok::kOp:
        if (accept_op("(")) {
          COHORT_ASSIGN_OR_RETURN(ExprPtr first, expression());
          if (accept_op(")")) return first;
          std::vector<ExprPtr> items{first};  // a tuple: taken as a list
          while (accept_op(",")) {
            if (peek().kind == Tok::kOp && peek().text == ")") break;
            COHORT_ASSIGN_OR_RETURN(ExprPtr item, expression());
            items.push_back(item);
          }
          COHORT_RETURN_IF_ERROR(expect_op(")"));
          return node(Expr::kList, "", items);
        }
        if (accept_op("[")) {
          std::vector<ExprPtr> items;
          while (!accept_op("]")) {
            if (!items.empty()) COHORT_RETURN_IF_ERROR(expect_op(","));
            if (accept_op("]")) break;
            COHORT_ASSIGN_OR_RETURN(ExprPtr item, expression());
            items.push_back(item);
          }
          return node(Expr::kList, "", items);
        }
        if (accept_op("{")) {
          std::vector<ExprPtr> items;  // key, value, key, value...
          while (!accept_op("}")) {
            if (!items.empty()) COHORT_RETURN_IF_ERROR(expect_op(","));
            if (accept_op("}")) break;
            COHORT_ASSIGN_OR_RETURN(ExprPtr key, expression());
            COHORT_RETURN_IF_ERROR(expect_op(":"));
            COHORT_ASSIGN_OR_RETURN(ExprPtr value, expression());
            items.push_back(key);
            items.push_back(value);
          }
          return node(Expr::kDict, "", items);
        }
        [[fallthrough]];
      default: return error_at(line_, "unexpected '" + tok.text + "' in an expression");
    }
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int line_;
  int nesting_ = 0;
  mutable bool too_deep_ = false;
};

// ---- statements ----

using Nodes = std::vector<NodePtr>;

class TreeBuilder {
 public:
  explicit TreeBuilder(std::vector<Tag> tags) : tags_(std::move(tags)) {}

  // Parses nodes until a statement whose keyword is in `stops`; returns it.
  Result<std::string> block(Nodes* out, const std::vector<std::string>& stops, ExprParser** stop_parser) {
    if (++blocks_open_ > ChatTemplateLimits::kMaxNesting)
      return limit_error(tags_[i_ ? i_ - 1 : 0].line, "block nesting", "ChatTemplateLimits::kMaxNesting",
                         ChatTemplateLimits::kMaxNesting);
    struct Close {
      int* open;
      ~Close() { --*open; }
    } close{&blocks_open_};
    while (i_ < tags_.size()) {
      const Tag& tag = tags_[i_++];
      if (tag.kind == Tag::kText) {
        auto n = std::make_shared<ChatTemplateNode>();
        n->kind = ChatTemplateNode::kText;
        n->text = tag.content;
        out->push_back(n);
        continue;
      }
      COHORT_ASSIGN_OR_RETURN(auto toks, lex(tag.content, tag.line));
      if (toks.size() > ChatTemplateLimits::kMaxTokensPerTag)
        return limit_error(tag.line, "a tag of " + std::to_string(toks.size()) + " tokens",
                           "ChatTemplateLimits::kMaxTokensPerTag", int64_t(ChatTemplateLimits::kMaxTokensPerTag));
      parsers_.push_back(std::make_unique<ExprParser>(std::move(toks), tag.line));
      ExprParser& p = *parsers_.back();
      auto n = std::make_shared<ChatTemplateNode>();
      n->line = tag.line;
      if (tag.kind == Tag::kOutput) {
        n->kind = ChatTemplateNode::kOutput;
        COHORT_ASSIGN_OR_RETURN(n->expr, p.parse_all());
        out->push_back(n);
        continue;
      }
      COHORT_ASSIGN_OR_RETURN(std::string keyword, p.name());
      for (const auto& s : stops) {
        if (keyword == s) {
          *stop_parser = &p;
          return keyword;
        }
      }
      COHORT_RETURN_IF_ERROR(statement(keyword, p, n.get(), tag.line));
      out->push_back(n);
    }
    if (!stops.empty()) return error_at(tags_.empty() ? 0 : tags_.back().line, "missing {% " + stops.back() + " %}");
    return std::string();
  }

 private:
  Status statement(const std::string& keyword, ExprParser& p, ChatTemplateNode* n, int line) {
    ExprParser* stop = nullptr;
    if (keyword == "if") {
      n->kind = ChatTemplateNode::kIf;
      COHORT_ASSIGN_OR_RETURN(ExprPtr cond, p.parse_all());
      for (;;) {
        Nodes body;
        COHORT_ASSIGN_OR_RETURN(std::string end, block(&body, {"elif", "else", "endif"}, &stop));
        n->branches.emplace_back(cond, std::move(body));
        if (end == "endif") break;
        if (end == "else") {
          cond = nullptr;
          Nodes last;
          COHORT_ASSIGN_OR_RETURN(end, block(&last, {"endif"}, &stop));
          n->branches.emplace_back(nullptr, std::move(last));
          break;
        }
        COHORT_ASSIGN_OR_RETURN(cond, stop->parse_all());
      }
      return Status::ok();
    }
    if (keyword == "for") {
      n->kind = ChatTemplateNode::kFor;
      do {
        COHORT_ASSIGN_OR_RETURN(std::string target, p.name());
        n->targets.push_back(target);
      } while (p.accept_op(","));
      if (!p.accept_name("in")) return error_at(line, "expected 'in' in a for loop");
      COHORT_ASSIGN_OR_RETURN(n->expr, p.iterable());
      if (p.accept_name("if")) { COHORT_ASSIGN_OR_RETURN(n->filter, p.expression()); }
      p.accept_name("recursive");
      if (!p.at_end()) return error_at(line, "unexpected text after the for loop's iterable");
      COHORT_ASSIGN_OR_RETURN(std::string end, block(&n->body, {"else", "endfor"}, &stop));
      if (end == "else") COHORT_RETURN_IF_ERROR(status_of(block(&n->else_body, {"endfor"}, &stop)));
      return Status::ok();
    }
    if (keyword == "set") {
      COHORT_ASSIGN_OR_RETURN(std::string target, p.name());
      if (p.accept_op(".")) {
        COHORT_ASSIGN_OR_RETURN(std::string attr, p.name());
        target += "." + attr;
      }
      n->targets.push_back(target);
      while (p.accept_op(",")) {
        COHORT_ASSIGN_OR_RETURN(std::string more, p.name());
        n->targets.push_back(more);
      }
      if (p.accept_op("=")) {
        n->kind = ChatTemplateNode::kSet;
        COHORT_ASSIGN_OR_RETURN(n->expr, p.parse_all());
        return Status::ok();
      }
      n->kind = ChatTemplateNode::kSetBlock;
      return status_of(block(&n->body, {"endset"}, &stop));
    }
    if (keyword == "macro") {
      n->kind = ChatTemplateNode::kMacro;
      COHORT_ASSIGN_OR_RETURN(std::string name, p.name());
      n->targets.push_back(name);
      COHORT_RETURN_IF_ERROR(p.expect_op("("));
      while (!p.accept_op(")")) {
        if (!n->params.empty()) COHORT_RETURN_IF_ERROR(p.expect_op(","));
        COHORT_ASSIGN_OR_RETURN(std::string param, p.name());
        ExprPtr def;
        if (p.accept_op("=")) { COHORT_ASSIGN_OR_RETURN(def, p.expression()); }
        n->params.emplace_back(param, def);
      }
      return status_of(block(&n->body, {"endmacro"}, &stop));
    }
    if (keyword == "generation") {
      n->kind = ChatTemplateNode::kGeneration;
      return status_of(block(&n->body, {"endgeneration"}, &stop));
    }
    if (keyword == "break") return n->kind = ChatTemplateNode::kBreak, Status::ok();
    if (keyword == "continue") return n->kind = ChatTemplateNode::kContinue, Status::ok();
    return error_at(line, "{% " + keyword + " %} is not supported");
  }

  std::vector<Tag> tags_;
  size_t i_ = 0;
  int blocks_open_ = 0;
  std::vector<std::unique_ptr<ExprParser>> parsers_;
};

}  // namespace

Result<NodePtr> parse_template(const std::string& source) {
  if (source.size() > ChatTemplateLimits::kMaxSourceBytes)
    return limit_error(1, "a template of " + std::to_string(source.size()) + " bytes",
                       "ChatTemplateLimits::kMaxSourceBytes", int64_t(ChatTemplateLimits::kMaxSourceBytes));
  COHORT_ASSIGN_OR_RETURN(std::vector<Tag> tags, cut_tags(source));
  TreeBuilder builder(std::move(tags));
  auto root = std::make_shared<ChatTemplateNode>();
  root->kind = ChatTemplateNode::kBody;
  ExprParser* stop = nullptr;
  COHORT_ASSIGN_OR_RETURN(std::string end, builder.block(&root->body, {}, &stop));
  (void)end;
  return NodePtr(root);
}

}  // namespace cohort::text::jinja
