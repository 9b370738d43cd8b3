// Structured output: the schema compiler, the byte matcher (every document
// of the schema accepted, nothing that is not JSON of it), and token masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "text/json_grammar.h"
#include "text/token_constraint.h"

namespace cohort::text {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const JsonGrammar> grammar(const std::string& schema, std::string prefix = "", std::string suffix = "") {
  auto g = JsonGrammar::compile(schema.empty() ? ojson() : ojson::parse(schema), std::move(prefix), std::move(suffix));
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? *g : nullptr;
}

// Whether `text` is accepted whole and complete.
bool accepts(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.feed(text) && m.complete();
}
// Whether `text` can still be the start of a document.
bool prefix_ok(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.feed(text);
}

TEST(JsonGrammar, AnyObject) {
  auto g = grammar("");
  EXPECT_TRUE(accepts(g, R"({"a": [1, -2.5e+3, "x\u00e9\n", true, null], "b": {"c": {}}, "d": []})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, "{\n  \"k\" : 0\n}"));
  EXPECT_FALSE(prefix_ok(g, "["));
  EXPECT_FALSE(prefix_ok(g, "{\"a\": 01"));       // no leading zeros
  EXPECT_FALSE(prefix_ok(g, "{\"a\": tru "));
  EXPECT_FALSE(prefix_ok(g, "{\"a\": \"\x01"));  // control characters are escaped
  EXPECT_FALSE(prefix_ok(g, "{\"a\": \"\\q"));
  EXPECT_FALSE(prefix_ok(g, "{\"a\": \"\xc3\""));  // a character cut short
  EXPECT_FALSE(prefix_ok(g, "{\"a\": \"\xa9"));     // a stray continuation byte
  EXPECT_FALSE(prefix_ok(g, "{\"a\": \"\xed\xa0"));  // a surrogate
  EXPECT_TRUE(accepts(g, "{\"a\": \"\xe2\x82\xac\xf0\x9f\x98\x80\"}"));
  EXPECT_FALSE(prefix_ok(g, "{} "));              // nothing after the value
  EXPECT_FALSE(prefix_ok(g, "{,"));
  EXPECT_TRUE(prefix_ok(g, "{\"a\": 1"));
  EXPECT_FALSE(accepts(g, "{\"a\": 1"));
  // Whitespace and numbers are bounded, so a model cannot loop on them.
  // (Appended: GCC 12 misreports -Wrestrict on "literal" + std::string.)
  EXPECT_TRUE(prefix_ok(g, std::string("{").append(JsonGrammar::kMaxWhitespaceRun, ' ')));
  EXPECT_FALSE(prefix_ok(g, std::string("{").append(JsonGrammar::kMaxWhitespaceRun + 1, ' ')));
  EXPECT_FALSE(prefix_ok(g, std::string("{\"a\": ").append(JsonGrammar::kMaxNumberBytes + 1, '1')));
}

TEST(JsonGrammar, PropertiesInOrderRequiredOnesPresent) {
  auto g = grammar(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
                       "required": ["name", "tags"], "additionalProperties": false})");
  EXPECT_TRUE(accepts(g, R"({"name": "Ada", "age": 36, "tags": ["x"]})"));
  EXPECT_TRUE(accepts(g, R"({"name": "Ada", "tags": []})"));  // age is optional
  EXPECT_FALSE(prefix_ok(g, R"({"age": 3)"));                  // name comes first and is required
  EXPECT_FALSE(prefix_ok(g, R"({"name": "Ada"})"));            // tags is required
  EXPECT_FALSE(prefix_ok(g, R"({"name": "Ada", "age": 3.5)"));  // an integer
  EXPECT_FALSE(prefix_ok(g, R"({"name": 3)"));
  EXPECT_FALSE(prefix_ok(g, R"({"name": "Ada", "other")"));
  EXPECT_FALSE(prefix_ok(g, R"({"name": "A", "tags": ["a", "b", )"));  // maxItems 2
}

TEST(JsonGrammar, EnumsConstsUnionsAndReferences) {
  auto e = grammar(R"({"enum": ["red", "green", 3, null]})");
  for (const char* ok : {"\"red\"", "\"green\"", "3", "null"}) EXPECT_TRUE(accepts(e, ok)) << ok;
  EXPECT_FALSE(prefix_ok(e, "\"blue"));
  EXPECT_FALSE(accepts(e, "\"re\""));
  auto u = grammar(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}], "description": "x"})");
  EXPECT_TRUE(accepts(u, "42"));
  EXPECT_TRUE(accepts(u, "\"abc\""));
  EXPECT_FALSE(prefix_ok(u, "\"abcd"));
  EXPECT_TRUE(accepts(u, "\"\\u00e9\""));
  auto n = grammar(R"({"type": ["number", "null"]})");
  EXPECT_TRUE(accepts(n, "-0.5"));
  EXPECT_TRUE(accepts(n, "null"));
  // A recursive tree through $defs.
  auto tree = grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})");
  EXPECT_TRUE(accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})"));
  EXPECT_FALSE(prefix_ok(tree, R"({"v": 1, "kids": [{"kids")"));
  auto s = grammar(R"({"type": "string", "minLength": 2})");
  EXPECT_FALSE(accepts(s, "\"a\""));
  EXPECT_TRUE(accepts(s, "\"ab\""));
  auto c = grammar(R"({"const": {"k": [1, 2]}})");
  EXPECT_TRUE(accepts(c, R"({"k":[1,2]})"));
}

// A schema with more alternatives than kMaxWays costs no more per byte:
// the earliest ones are followed, and text of a dropped one is refused.
TEST(JsonGrammar, AlternativesFollowedAtOnceAreBounded) {
  ojson values = ojson::array();
  for (int i = 0; i < 200; ++i) values.push_back(std::string(1, 'v').append(std::to_string(1000 + i)));
  auto g = JsonGrammar::compile(ojson{{"enum", values}});
  ASSERT_TRUE(g.is_ok());
  JsonMatcher m(*g);
  ASSERT_TRUE(m.feed('"'));
  EXPECT_EQ(m.ways(), size_t(JsonGrammar::kMaxWays));
  EXPECT_TRUE(accepts(*g, "\"v1000\""));
  EXPECT_FALSE(accepts(*g, "\"v1199\""));
}

TEST(JsonGrammar, PrefixAndSuffixAroundTheValue) {
  auto g = grammar(R"({"type": "object", "properties": {"name": {"const": "f"}, "arguments": {"type": "object"}},
                       "required": ["name", "arguments"]})",
                   "<tool_call>\n", "\n</tool_call>");
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
  EXPECT_FALSE(prefix_ok(g, "{"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}"));
}

TEST(JsonGrammar, UnsupportedKeywordsAreNamedWithTheirPlace) {
  for (const auto& [schema, where] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}})", "schema.properties.a.pattern"},
           {R"({"type": "integer", "minimum": 3})", "schema.minimum"},
           {R"({"type": "tuple"})", "schema.type"},
           {R"({"$ref": "#/$defs/missing"})", "schema.$ref"},
           {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "schema.required"},
           {R"({"type": "array", "minItems": 3, "maxItems": 2})", "schema"},
           {R"(false)", "schema"},
           // (the fuzzer's find: a non-boolean nullable threw out of compile)
           {R"({"type": "object", "properties": {"a": {"type": "string"}}, "nullable": ["a"]})",
            "schema.nullable"}}) {
    auto g = JsonGrammar::compile(ojson::parse(schema));
    ASSERT_FALSE(g.is_ok()) << schema;
    EXPECT_EQ(g.status().message().rfind(where, 0), 0u) << g.status().message();
  }
}

// Random JSON documents are accepted whole by the any-object grammar, with
// random layout; random byte edits are accepted only when the result is
// still a JSON object (the matcher never lets through what is not JSON).
TEST(JsonGrammar, RandomDocumentsAndEditsAgreeWithAJsonParser) {
  std::mt19937 rng(7);
  std::function<ojson(int)> value = [&](int depth) -> ojson {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0: return ojson(int(rng() % 2000) - 1000);
      case 1: return ojson(double(rng() % 100000) / 64.0 - 500);
      case 2: {
        static const char* kStrings[] = {"", "s", "a\"b", "back\\slash", "line\nbreak", "\xc3\xa9t\xc3\xa9", "tab\t"};
        return ojson(std::string(kStrings[rng() % 7]));
      }
      case 3: return rng() % 2 ? ojson(bool(rng() % 2)) : ojson(nullptr);
      case 4: {
        ojson a = ojson::array();
        for (int i = 0, n = int(rng() % 4); i < n; ++i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        ojson o = ojson::object();
        for (int i = 0, n = int(rng() % 4); i < n; ++i) o[std::string("k").append(std::to_string(rng() % 50))] = value(depth + 1);
        return o;
      }
    }
  };
  auto g = grammar("");
  int edits_accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    ojson doc = ojson::object();
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) doc[std::string("p").append(std::to_string(k))] = value(0);
    const std::string text = doc.dump(rng() % 2 ? 2 : -1);
    ASSERT_TRUE(accepts(g, text)) << text;
    std::string edited = text;
    edited[rng() % edited.size()] = "{}[]\",:0e.-a \\"[rng() % 14];
    if (accepts(g, edited)) {
      ++edits_accepted;
      bool object = false;
      try {
        object = ojson::parse(edited).is_object();
      } catch (const ojson::out_of_range&) {
        object = true;  // 1e999: JSON, though past a double
      } catch (const ojson::exception&) {
      }
      EXPECT_TRUE(object) << edited;
    }
  }
  EXPECT_GT(edits_accepted, 0);
}

// Tokens of several bytes: a token is allowed when all its bytes are; the
// end-of-sequence token only once the value is complete.
TEST(TokenConstraint, MasksTokensByTheirBytes) {
  ByteTokenizer bytes;
  auto vocabulary = TokenVocabulary::build(bytes, {0});
  auto g = grammar(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})");
  TokenConstraint c(g, vocabulary);
  auto allowed = [&] {
    std::string s;
    const auto& mask = c.allowed();
    for (int t = 0; t < 256; ++t) if (mask[size_t(t)]) s.push_back(char(t));
    return s;
  };
  std::string start = allowed();
  std::sort(start.begin(), start.end());
  EXPECT_EQ(start, std::string("\t\n\r {"));
  for (char ch : std::string("{\"ok\": ")) ASSERT_TRUE(c.advance(ch)) << ch;
  std::string after_colon = allowed();
  std::sort(after_colon.begin(), after_colon.end());
  EXPECT_EQ(after_colon, std::string("\t\n\r ft"));
  EXPECT_FALSE(c.advance('x'));
  for (char ch : std::string("true}")) ASSERT_TRUE(c.advance(ch)) << ch;
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed(), std::string(1, '\0'));  // only the end-of-sequence token
  std::vector<float> logits(260, 1.0f);
  EXPECT_TRUE(c.mask_logits(logits.data(), 260));
  EXPECT_EQ(logits[0], 1.0f);
  EXPECT_TRUE(std::isinf(logits[1]) && std::isinf(logits[259]));
}

}  // namespace
}  // namespace cohort::text
