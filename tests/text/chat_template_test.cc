// The chat-template engine, construct by construct, as jinja2 renders with
// transformers' settings (trim_blocks and lstrip_blocks on); then the errors
// a template can raise, and the limits that keep any template from hanging
// or crashing the process.
#include <cctype>
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "text/chat_template.h"

namespace cohort::text {
namespace {

using ojson = nlohmann::ordered_json;

// Renders `source` with `context` (an object); the error's message on failure.
std::string render(const std::string& source, const ojson& context = ojson::object()) {
  auto parsed = ChatTemplate::parse(source);
  if (!parsed) return "PARSE ERROR: " + parsed.status().message();
  auto out = parsed->render(context);
  if (!out) return "RENDER ERROR: " + out.status().message();
  return out->text;
}

TEST(ChatTemplateStatements, IfElifElseAndForWithElse) {
  EXPECT_EQ(render("{% if x > 2 %}big{% elif x > 1 %}mid{% else %}small{% endif %}", {{"x", 2}}), "mid");
  EXPECT_EQ(render("{% for m in items %}{{ m }},{% else %}none{% endfor %}", {{"items", ojson::array()}}), "none");
  EXPECT_EQ(render("{% for m in items if m != 2 %}{{ m }}{% endfor %}", {{"items", {1, 2, 3}}}), "13");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
}

TEST(ChatTemplateStatements, LoopVariablesBreakAndContinue) {
  const std::string t =
      "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first }}/{{ loop.last }}/"
      "{{ loop.length }}|{% endfor %}";
  EXPECT_EQ(render(t, {{"xs", {"a", "b"}}}), "1/0/2/True/False/2|2/1/1/False/True/2|");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}",
                   {{"xs", {1, 2, 3, 4, 5}}}),
            "13");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}", {{"xs", {1, 2}}}),
            ">1>2 1>2> ");
}

TEST(ChatTemplateStatements, SetNamespaceAndSetBlock) {
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% endfor %}"
                   "{{ ns.n }}"),
            "6");
  // A plain set inside a loop does not leak out of it (jinja2 scoping).
  EXPECT_EQ(render("{% set n = 1 %}{% for x in [5] %}{% set n = x %}{% endfor %}{{ n }}"), "1");
  EXPECT_EQ(render("{% set body %}in {{ 1 + 1 }}{% endset %}[{{ body }}]"), "[in 2]");
}

TEST(ChatTemplateStatements, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', punct='?') }}"),
            "hi a! hi b?");
}

TEST(ChatTemplateWhitespace, TrimBlocksLstripBlocksAndDashes) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the
  // indentation before one.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(render("a   {{- 'b' -}}   c"), "abc");
  EXPECT_EQ(render("x\n{%- if true -%}\n  y\n{%- endif %}"), "xy");
  EXPECT_EQ(render("{# a comment #}z"), "z");
}

TEST(ChatTemplateExpressions, OperatorsFollowPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}"),
            "3 -4 1 2 1024 3.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}"), "a1None ababab [1, 2]");
  EXPECT_EQ(render("{{ 'x' if 1 > 2 else 'y' }} {{ not true }} {{ 1 in [1, 2] }} {{ 'b' not in 'abc' }}"),
            "y False True False");
  EXPECT_EQ(render("{{ 'hello'[1:3] }} {{ [1, 2, 3][::-1] }} {{ 'abc'[-1] }}"), "el [3, 2, 1] c");
  EXPECT_EQ(render("{{ {'a': 1}['a'] }} {{ d.k }} {{ d['missing'] is defined }}", {{"d", {{"k", "v"}}}}),
            "1 v False");
}

TEST(ChatTemplateExpressions, FiltersAsTransformersTemplatesUseThem) {
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ [1, 2, 3] | length }}|{{ ['a', 'b'] | join(', ') }}"), "a b|3|a, b");
  EXPECT_EQ(render("{{ 'Hi' | upper }} {{ 'Hi' | lower }} {{ 'ab' | replace('a', 'x') }} {{ 3 | string }}"),
            "HI hi xb 3");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [true, none]} | tojson }}"), "{\"b\": 1, \"a\": [true, null]}");
  EXPECT_EQ(render("{{ {'a': 1} | tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(render("{{ undefined_name | default('d') }} {{ [3, 1] | first }} {{ [3, 1] | last }}"), "d 3 1");
  EXPECT_EQ(render("{{ xs | selectattr('k', 'equalto', 1) | map(attribute='v') | list }}",
                   {{"xs", {{{"k", 1}, {"v", "a"}}, {{"k", 2}, {"v", "b"}}}}}),
            "['a']");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ [1, 1, 2] | unique | list }}|{{ '5' | int + 1 }}"),
            "a\n  b|[1, 2]|6");
}

TEST(ChatTemplateExpressions, TestsAndStringMethods) {
  EXPECT_EQ(render("{{ x is string }} {{ x is none }} {{ 3 is odd }} {{ d is mapping }} {{ x is not defined }}",
                   {{"x", "s"}, {"d", ojson::object()}}),
            "True False True True False");
  EXPECT_EQ(render("{{ 'abc'.startswith('a') }} {{ ' x '.strip() }} {{ 'a,b'.split(',') }} {{ 'ab'.upper() }}"),
            "True x ['a', 'b'] AB");
  EXPECT_EQ(render("{{ d.get('k', 0) }} {{ d.keys() | list }}", {{"d", {{"j", 1}}}}), "0 ['j']");
}

TEST(ChatTemplateErrors, RaiseExceptionAndUnsupportedConstructsNameTheLine) {
  EXPECT_EQ(render("{{ raise_exception('no system role') }}"), "RENDER ERROR: chat template raised: no system role");
  EXPECT_NE(render("line one\n{% include 'x' %}").find("line 2"), std::string::npos);
  EXPECT_NE(render("{% if true %}open").find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(render("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(render("{{ (1 }}").find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(render("{{ x[] }}").find("an index needs a value"), std::string::npos);
  // Integers stay within 64 bits (Python's would grow): an error, never undefined behaviour.
  EXPECT_NE(render("{{ 10**10**10 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(render("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(render("{{ 99999999999999999999999 }}").find("beyond 64 bits"), std::string::npos);
  EXPECT_EQ(render("{{ 2**62 }} {{ true + 1 }} {{ -(2**62) // -1 }}"), "4611686018427387904 2 4611686018427387904");
}

// What a malicious model folder's template tries; each is refused quickly
// with an error naming the limit it hit.
// The source is made when the case runs: some are megabytes, which every
// process of this binary would otherwise build and copy at start-up.
struct Attack {
  std::string limit;
  std::string (*source)();
};
void PrintTo(const Attack& attack, std::ostream* os) { *os << attack.limit; }

class ChatTemplateLimitsTest : public ::testing::TestWithParam<Attack> {};

TEST_P(ChatTemplateLimitsTest, IsRefusedWithinTwoSecondsNamingTheLimit) {
  const std::string& limit = GetParam().limit;
  const std::string source = GetParam().source();
  const auto start = std::chrono::steady_clock::now();
  const std::string out = render(source, {{"messages", ojson::array()}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(out.find("ERROR"), std::string::npos) << out.substr(0, 200);
  // Under load the wall-clock bound may stop a render before the count
  // that would have: either way a stated limit is named.
  EXPECT_TRUE(out.find(limit) != std::string::npos || out.find("kMaxMilliseconds") != std::string::npos)
      << out.substr(0, 200);
  // Within two seconds: the render's own deadline (500 ms) is checked
  // between steps, and the doubling case's last steps copy strings of tens
  // of megabytes, about 0.95 s in all on a 2-core VM where fresh pages
  // fault slowly (1.01 s once under a parallel build). Unbounded growth
  // would take minutes.
  EXPECT_LT(seconds, 2.0);
}

std::string nested_parentheses(int n) { return "{{ " + std::string(size_t(n), '(') + "1" + std::string(size_t(n), ')') + " }}"; }
std::string nested_ifs(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "{% if true %}";
  for (int i = 0; i < n; ++i) s += "{% endif %}";
  return s;
}
std::string long_chain(int n) {
  std::string s = "{{ 1";
  for (int i = 0; i < n; ++i) s += " + 1";
  return s + " }}";
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, ChatTemplateLimitsTest,
    ::testing::Values(
        Attack{"kMaxItems", [] { return std::string("{% for i in range(10**9) %}{% endfor %}"); }},
        Attack{"kMaxCallDepth", [] { return std::string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }},
        Attack{"kMaxBytes", [] { return std::string("{{ 'x' * 10**10 }}"); }},
        Attack{"kMaxBytes", [] { return std::string("{{ ('' * 10**15) ~ 'x' * 10**9 }}"); }},
        Attack{"kMaxSteps", [] { return std::string("{% for i in range(100000) %}{% for j in range(100000) %}"
                                                "{% endfor %}{% endfor %}"); }},
        Attack{"kMaxTokensPerTag", [] { return nested_parentheses(100000); }},
        Attack{"kMaxNesting", [] { return nested_parentheses(1000); }},
        Attack{"kMaxSourceBytes", [] { return nested_ifs(100000); }},
        Attack{"kMaxNesting", [] { return nested_ifs(150); }},
        Attack{"kMaxTokensPerTag", [] { return long_chain(100000); }},
        Attack{"kMaxNesting", [] { return long_chain(1000); }},
        Attack{"kMaxBytes", [] { return std::string("{% set ns = namespace(s='x' * 100000) %}{% for i in range(64) %}"
                                                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"); }},
        Attack{"kMaxBytes", [] { return std::string("{% set s = 'x' * 3000000 %}{{ s | replace('x', s) }}"); }},
        Attack{"kMaxNesting", [] { return std::string("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                                                  "{% set ns.l = [ns.l] %}{% endfor %}"); }},
        Attack{"holding itself", [] { return std::string("{% set ns = namespace() %}{% set ns.me = [ns] %}"); }},
        Attack{"holding itself", [] { return std::string("{% set a = namespace() %}{% set b = namespace() %}"
                                                     "{% set a.x = [b] %}{% set b.y = {'k': a} %}"); }},
        Attack{"kMaxSourceBytes", [] { return std::string(2 << 20, 'x'); }},
        Attack{"4096", [] { return std::string("{{ range(100000) | unique }}"); }},
        Attack{"kMaxItems", [] { return std::string("{% for c in 'x' * 20000000 %}{% endfor %}"); }}),
    [](const ::testing::TestParamInfo<Attack>& info) {
      std::string name = std::to_string(info.index) + "_";
      for (char c : info.param.limit) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(ChatTemplateLimits, DeeplyNestedMessagesAreRefusedBeforeRendering) {
  ojson deep = "leaf";
  for (int i = 0; i < 100000; ++i) deep = ojson::array({std::move(deep)});
  // Moved, not copied: json's copy recurses once per level, which 100000
  // levels of test code (built at -O1) do not fit on the stack.
  ojson context = {{"messages", ojson::array({{{"role", "user"}, {"content", std::move(deep)}}})}};
  const std::string out = render("{{ messages | length }}", context);
  EXPECT_NE(out.find("kMaxNesting"), std::string::npos) << out.substr(0, 200);
}

TEST(ChatTemplateLimits, NamespacesStillHoldWhatRealTemplatesPutInThem) {
  EXPECT_EQ(render("{% set ns = namespace(a=1, l=[]) %}{% set ns.l = ns.l + [[1, 2]] %}{{ ns.l }} {{ ns.a }}"),
            "[[1, 2]] 1");
  EXPECT_EQ(render("{% set a = namespace(x=0) %}{% set b = namespace(y=[a]) %}{{ b.y[0].x }}"), "0");
}

}  // namespace
}  // namespace cohort::text
