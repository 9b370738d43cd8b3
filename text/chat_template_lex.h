// The chat template's tokens: the template text cut into tags (text,
// {{ output }}, {% statement %}: whitespace control `-`, and jinja2's
// trim_blocks / lstrip_blocks, which transformers turns on), and a tag's
// expression text cut into names, literals and operators. The parser
// (chat_template_parse.cc) builds the tree from them.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::text::jinja {

struct Tag {
  enum Kind { kText, kOutput, kStatement } kind;
  std::string content;
  int line;
};

struct Tok {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
};

// "chat template line N: what".
Status error_at(int line, const std::string& what);

// The template's tags in order; an unclosed tag is an error naming its line.
Result<std::vector<Tag>> cut_tags(const std::string& src);

// The tokens of one tag's expression text, ending with a kEnd token.
Result<std::vector<Tok>> lex(const std::string& s, int line);

}  // namespace cohort::text::jinja
