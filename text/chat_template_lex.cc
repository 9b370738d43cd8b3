#include "text/chat_template_lex.h"

#include <cctype>
#include <cstring>

namespace cohort::text::jinja {
namespace {

// Where the tag that opens at `from` closes (`closer`), skipping quoted strings.
size_t find_close(const std::string& s, size_t from, const std::string& closer) {
  char quote = 0;
  for (size_t i = from; i + 1 < s.size() + 1; ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (s.compare(i, closer.size(), closer) == 0) return i;
  }
  return std::string::npos;
}

void rstrip_all(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

}  // namespace

Status error_at(int line, const std::string& what) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what);
}

Result<std::vector<Tag>> cut_tags(const std::string& src) {
  std::vector<Tag> tags;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false, trim_newline = false;
  auto count_lines = [&](size_t a, size_t b) {
    for (size_t i = a; i < b && i < src.size(); ++i) line += src[i] == '\n';
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    const int text_line = line;
    bool line_starting = pos == 0;  // jinja2: the previous tag ended a line
    count_lines(pos, open == std::string::npos ? src.size() : open);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    } else if (trim_newline) {
      if (text.compare(0, 1, "\n") == 0) text.erase(0, 1), line_starting = true;
      else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2), line_starting = true;
    }
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) tags.push_back({Tag::kText, text, text_line});
      break;
    }
    const char type = src[open + 1];
    const bool minus = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus = open + 2 < src.size() && src[open + 2] == '+';
    if (minus) {
      rstrip_all(text);
    } else if (type != '{' && !plus) {
      // lstrip_blocks, as jinja2's lexer does it: spaces and tabs between
      // the start of the tag's line and the tag go.
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((l_pos > 0 || line_starting) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
        text.resize(l_pos);
    }
    if (!text.empty()) tags.push_back({Tag::kText, text, text_line});
    const std::string closer = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    const size_t body = open + 2 + (minus || plus ? 1 : 0);
    const size_t close = type == '#' ? src.find(closer, body) : find_close(src, body, closer);
    if (close == std::string::npos) return error_at(line, "a tag is not closed (" + closer + " missing)");
    std::string content = src.substr(body, close - body);
    const bool close_minus = !content.empty() && content.back() == '-';
    if (close_minus) content.pop_back();
    if (type != '#') tags.push_back({type == '{' ? Tag::kOutput : Tag::kStatement, content, line});
    count_lines(open, close + 2);
    pos = close + 2;
    strip_next = close_minus;
    trim_newline = type != '{';
  }
  return tags;
}

Result<std::vector<Tok>> lex(const std::string& s, int line) {
  std::vector<Tok> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    if (std::isspace(c)) { ++i; continue; }
    if (std::isalpha(c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(c)) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '_')) {
        if (s[j] == '.') {
          if (j + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j + 1]))) break;
          is_float = true;
        }
        ++j;
      }
      out.push_back({is_float ? Tok::kFloat : Tok::kInt, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != char(c); ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) { v.push_back(s[j]); continue; }
        const char e = s[++j];
        v += e == 'n' ? "\n" : e == 't' ? "\t" : e == 'r' ? "\r" : e == '0' ? std::string(1, '\0') : std::string(1, e);
      }
      if (j >= s.size()) return error_at(line, "a string is not closed");
      out.push_back({Tok::kString, v});
      i = j + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[", "]", "{", "}", ",", ":",
                                  ".", "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops) {
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Tok::kOp, op});
          i += std::strlen(op);
          found = true;
          break;
        }
      }
      if (!found) return error_at(line, std::string("unexpected character '") + char(c) + "'");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

}  // namespace cohort::text::jinja
