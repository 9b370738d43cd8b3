// Structured output: a JSON schema compiled to a grammar, and a matcher that
// says, byte by byte, whether text can still become a value of it. The
// server masks each step's tokens to those whose bytes the matcher accepts
// (token_constraint.h), so a reply asked for as JSON is JSON of its schema.
//
// What a schema may say (the JSON-schema subset that OpenAI's structured
// outputs, xgrammar and llguidance agree on): type (one or a list: object,
// array, string, number, integer, boolean, null), properties, required,
// additionalProperties (false, true or a schema; with properties, only the
// listed ones are generated), items, minItems, maxItems, minLength,
// maxLength, enum, const, anyOf, oneOf (as anyOf), allOf of one schema,
// $ref to "#/$defs/..." or "#/definitions/...", and the annotations that
// constrain nothing (title, description, default, examples, $schema, $id,
// format, strict). Anything else (pattern, minimum, ...) is an error naming
// the keyword and where it is, so that no reply silently breaks its schema.
//
// Generation order: listed properties come in the order the schema lists
// them, each optional one may be left out, each required one must appear
// (as OpenAI and xgrammar generate them). Whitespace between tokens is
// allowed up to kMaxWhitespaceRun bytes in a row, and numbers to
// kMaxNumberBytes, so that a model cannot loop on layout forever.
//
// A grammar may have literal text around the value (a tool call's
// "<tool_call>\n" and "\n</tool_call>").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cohort::text {

class JsonGrammar {
 public:
  static constexpr int kMaxWhitespaceRun = 12;
  static constexpr int kMaxNumberBytes = 24;
  static constexpr int kMaxNodes = 4096;       // schema size after $refs are resolved
  static constexpr int kMaxFreeItems = 512;    // array items and free-object keys when unbounded
  static constexpr int kMaxKeyBytes = 256;     // keys of objects without listed properties
  // Parses a matcher follows at once (anyOf, enums, optional properties):
  // past this, the later alternatives are dropped, so a schema cannot make
  // a step's cost grow without bound; the matcher may then refuse text
  // that only a dropped alternative took, never accept text none takes.
  static constexpr int kMaxWays = 64;

  // `schema` null: any JSON object (response_format json_object). Errors
  // name the keyword and its place ("schema.properties.a.pattern").
  static Result<std::shared_ptr<const JsonGrammar>> compile(const nlohmann::ordered_json& schema, std::string prefix = "",
                                                            std::string suffix = "");

  enum class Kind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kBoolean, kNull, kLiterals, kAnyOf };
  struct Property {
    int literal = 0;  // index into literals(): the key as JSON text, quotes included
    int node = 0;
    bool required = false;
  };
  struct Node {
    Kind kind = Kind::kAny;
    std::vector<Property> properties;  // kObject
    bool free_keys = false;            // kObject without listed properties
    int additional = -1;               // kObject with free keys: the values' node
    int items = -1;                    // kArray
    int min_items = 0, max_items = kMaxFreeItems;
    int min_length = 0, max_length = -1;  // kString, in code points (-1: none)
    std::vector<int> choices;          // kLiterals: literal indices; kAnyOf: nodes
  };

  // literal(kTrue), literal(kFalse), literal(kNull) are those words.
  static constexpr int kTrue = 0, kFalse = 1, kNull = 2;
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::string& literal(int i) const { return literals_[size_t(i)]; }
  int root() const { return root_; }
  int prefix_literal() const { return prefix_; }  // -1: none
  int suffix_literal() const { return suffix_; }

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  std::vector<std::string> literals_;
  int root_ = 0, prefix_ = -1, suffix_ = -1;
};

// Where a matcher is: every way the bytes so far can continue (a set of
// parse stacks). Copyable; feed() is pure.
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);
  // False (and unchanged) when no continuation accepts `byte`.
  bool feed(unsigned char byte);
  bool feed(const std::string& bytes);
  // The text so far is a whole value (with the suffix): nothing more may come.
  bool complete() const;
  bool dead() const { return stacks_.empty(); }
  // Parses followed at once (at most JsonGrammar::kMaxWays).
  size_t ways() const { return stacks_.size(); }
  // A key for the state (equal keys: equal futures), for caching masks.
  std::string key() const;

  struct Frame {
    uint8_t kind = 0;
    uint8_t phase = 0;
    int32_t node = 0;
    int32_t a = 0;  // literal index / string length / object's next property / array count
    int32_t b = 0;  // literal position / string escape state / object's current property / number bytes
    bool operator==(const Frame&) const = default;
  };
  struct Stack {
    std::vector<Frame> frames;
    int32_t whitespace = 0;  // the run of whitespace bytes just fed
    bool operator==(const Stack&) const = default;
  };

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<Stack> stacks_;
};

}  // namespace cohort::text
