// Unit tests of the Jinja interpreter (text/jinja/template.h): syntax, whitespace control,
// Python semantics of values, filters, tests, methods, errors and limits.
#include <string>

#include "gtest/gtest.h"
#include "text/jinja/template.h"
#include "tests/text/jinja/render.h"

namespace banyan::text::jinja {
namespace {

using json = nlohmann::ordered_json;  // keeps key order, as request bodies do

TEST(JinjaTest, TextExpressionsAndComments) {
  EXPECT_EQ(R("a{{ 1 + 2 }}b{# gone #}c"), "a3bc");
  EXPECT_EQ(R("{{ x }}", {{"x", "hi"}}), "hi");
  EXPECT_EQ(R("{{ undefined_name }}|"), "|");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(R("{{ 'a' 'b' }}"), "ab");
  EXPECT_EQ(R("{{ \"q\\n\\t\\\\\" }}"), "q\n\t\\");
  EXPECT_EQ(R("text\n"), "text");  // one trailing newline dropped
  EXPECT_EQ(R("text\n\n"), "text\n");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(R("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(R("a\n  {%- if true %}x{% endif %}"), "ax");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one.
  EXPECT_EQ(R("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(R("{% for i in [1,2] %}\n{{ i }}\n{% endfor %}"), "1\n2\n");
  // Not at a line start: no lstrip.
  EXPECT_EQ(R("a  {% if true %}b{% endif %}"), "a  b");
  // lstrip_blocks leaves {{ }} alone.
  EXPECT_EQ(R("  {{ 1 }}"), "  1");
  EXPECT_EQ(R("  {#c#}\nx"), "x");
  EXPECT_EQ(R("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
}

TEST(JinjaTest, IfElifElse) {
  const std::string t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(R(t, {{"n", 3}}), "big");
  EXPECT_EQ(R(t, {{"n", 2}}), "two");
  EXPECT_EQ(R(t, {{"n", 0}}), "small");
  EXPECT_EQ(R("{{ 'y' if x else 'n' }}{{ 'z' if false }}", {{"x", json::array()}}), "n");
}

TEST(JinjaTest, ForLoops) {
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
              "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
              {{"xs", {"a", "b"}}}),
            "10TrueFalse22;21FalseTrue21;");
  EXPECT_EQ(R("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
              {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1,b=2,");
  EXPECT_EQ(R("{% for k in d %}{{ k }}{% endfor %}", {{"d", {{"x", 1}}}}), "x");
  EXPECT_EQ(R("{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "12");
  EXPECT_EQ(R("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(R("{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}"), "aba");
  EXPECT_EQ(R("{% for x in 'hé' %}[{{ x }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(R("{% for x in [1, 2] %}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}"), "2|1|");
}

TEST(JinjaTest, ScopingAndNamespace) {
  // A set inside a loop stays in the loop; a namespace carries the value out.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(R("{% set ns = namespace(x=1) %}{% for i in [5] %}{% set ns.x = i %}{% endfor %}"
              "{{ ns.x }}"),
            "5");
  EXPECT_EQ(R("{% if true %}{% set y = 3 %}{% endif %}{{ y }}"), "3");
  EXPECT_EQ(R("{% set a, b = [1, 2] %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(R("{% set blk %}in {{ 1 }}{% endset %}[{{ blk }}]"), "[in 1]");
  EXPECT_EQ(R("{% set d = {'a': 1} %}{% set d.a = 2 %}"),
            "ERROR: line 1: cannot assign attribute 'a' of 'd': not a namespace() object");
}

TEST(JinjaTest, Macros) {
  EXPECT_EQ(R("{% macro greet(name, punct='!') %}hi {{ name }}{{ punct }}{% endmacro %}"
              "{{ greet('a') }} {{ greet('b', punct='?') }} {{ greet(name='c') }}"),
            "hi a! hi b? hi c!");
  EXPECT_EQ(R("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}x{% endcall %}"),
            "<x>");
  EXPECT_EQ(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").rfind("ERROR: line 1: calls nest", 0),
            0u);
  EXPECT_EQ(R("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(JinjaTest, OperatorsFollowPython) {
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"),
            "3 -4 2 3.5 1024 7");
  EXPECT_EQ(R("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 10 / 5 }}"),
            "1.0 0.30000000000000004 1e+20 2.0");
  EXPECT_EQ(R("{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }}"), "ababab [1, 2] ab");
  EXPECT_EQ(R("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [3] }}"),
            "True True True False");
  EXPECT_EQ(R("{{ [1, {'a': 'x'}] == [1, {'a': 'x'}] }} {{ 1 == 1.0 }} {{ 'a' < 'b' }}"),
            "True True True");
  EXPECT_EQ(R("{{ 0 or 'x' }} {{ 1 and 2 }} {{ not none }}"), "x 2 True");
  EXPECT_EQ(R("{{ 'a' + 1 }}"), "ERROR: line 1: unsupported operand types for +: 'str' and 'int'");
  EXPECT_EQ(R("{{ 1 // 0 }}"), "ERROR: line 1: integer division or modulo by zero");
  EXPECT_EQ(R("{{ xs|length - 1 }}", {{"xs", {1, 2, 3}}}), "2");  // the filter binds first
}

TEST(JinjaTest, IndexingAndSlicing) {
  const json ctx = {{"xs", {1, 2, 3, 4}}, {"s", "héllo"}, {"m", {{"k", "v"}}}};
  EXPECT_EQ(R("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[5] }}", ctx),
            "14[2, 3][4, 3, 2, 1][1, 3]");
  EXPECT_EQ(R("{{ s[1] }}{{ s[:-1] }}{{ s[-3:] }}{{ s|length }}", ctx), "éhéllllo5");
  EXPECT_EQ(R("{{ m.k }}{{ m['k'] }}{{ m.nope is defined }}{{ xs.0 }}", ctx), "vvFalse1");
  EXPECT_EQ(R("{{ m.a.b }}", ctx),
            "ERROR: line 1: cannot read attribute 'b' of an undefined value");
}

TEST(JinjaTest, Tests) {
  const json ctx = {{"s", "x"}, {"n", nullptr}, {"d", json::object()}, {"l", json::array()}};
  EXPECT_EQ(R("{{ s is string }}{{ n is none }}{{ d is mapping }}{{ l is sequence }}"
              "{{ q is defined }}{{ q is undefined }}{{ s is not none }}{{ 3 is odd }}"
              "{{ 4 is divisibleby 2 }}{{ 'a' is equalto 'a' }}{{ true is true }}"
              "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ l is iterable }}",
              ctx),
            "TrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 1 is frobnicated }}"), "PARSE ERROR: line 1: unknown test 'frobnicated'");
}

TEST(JinjaTest, Filters) {
  const json msgs = {{{"role", "user"}, {"content", "a"}},
                     {{"role", "tool"}, {"content", "b"}},
                     {{"role", "user"}, {"content", "c"}, {"x", 1}}};
  const json ctx = {{"msgs", msgs}};
  EXPECT_EQ(R("{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}",
              ctx),
            "a,c");
  EXPECT_EQ(R("{{ msgs|rejectattr('role', 'equalto', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(R("{{ msgs|selectattr('x', 'undefined')|map(attribute='content')|join }}", ctx), "ab");
  EXPECT_EQ(R("{{ msgs|selectattr('x')|map(attribute='content')|first }}", ctx), "c");
  EXPECT_EQ(R("{{ '  a b  '|trim }}|{{ 'ab'|upper }}|{{ 'hello world'|title }}|"
              "{{ 'hELLO'|capitalize }}|{{ 'aXa'|replace('a', 'b') }}"),
            "a b|AB|Hello World|Hello|bXb");
  EXPECT_EQ(R("{{ x|default('d') }}{{ ''|default('e', true) }}{{ 'v'|d('f') }}"), "dev");
  EXPECT_EQ(R("{{ [3, 1, 2]|sort|list }}{{ [1, 2]|last }}{{ [1, 1, 2]|unique|list }}"
              "{{ '42'|int + 1 }}{{ 'x'|int }}{{ 3|string + 'a' }}{{ [1, 2]|sum }}"
              "{{ [1, 5, 2]|max }}{{ {'b': 1, 'a': 2}|dictsort|map('first')|join }}"),
            "[1, 2, 3]2[1, 2]4303a35ab");
  EXPECT_EQ(R("{% for k, v in {'a': 1}|items %}{{ k }}{{ v }}{% endfor %}"), "a1");
  EXPECT_EQ(R("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}"), "a\n  b|  a\n  b");
  EXPECT_EQ(R("{{ x|frob }}"), "PARSE ERROR: line 1: unknown filter 'frob'");
}

TEST(JinjaTest, ToJsonMatchesPythonJsonDumps) {
  const json ctx = {{"t", {{"name", "f"}, {"n", 1}, {"x", 1.5}, {"ok", true}, {"z", nullptr},
                           {"l", {1, "é\"\n"}}, {"e", json::object()}}}};
  EXPECT_EQ(R("{{ t|tojson }}", ctx),
            "{\"name\": \"f\", \"n\": 1, \"x\": 1.5, \"ok\": true, \"z\": null, "
            "\"l\": [1, \"é\\\"\\n\"], \"e\": {}}");
  EXPECT_EQ(R("{{ {'a': [1, 2]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
}

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(R("{{ '\\n x \\n'.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|"
              "{{ 'a\\n\\n'.rstrip('\\n') }}"),
            "x|a|a|a");
  EXPECT_EQ(R("{{ 'a</think>b</think>c'.split('</think>')[-1] }}|{{ ' a  b '.split() }}|"
              "{{ 'a,b,c'.split(',', 1) }}"),
            "c|['a', 'b']|['a', 'b,c']");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'Ab'.lower() }}"
              "{{ 'ab'.upper() }}{{ 'a b'.title() }}{{ 'ab'.replace('b', 'c') }}"),
            "TrueTrueabABA Bac");
  EXPECT_EQ(R("{{ '{} and {name}'.format(1, name='x') }}|{{ ', '.join(['a', 'b']) }}"),
            "1 and x|a, b");
  EXPECT_EQ(R("{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}{{ 'x'.nope }}|"), "12|");
}

TEST(JinjaTest, GlobalsAndRaise) {
  EXPECT_EQ(R("{{ range(3)|list }}{{ range(1, 7, 2)|list }}"), "[0, 1, 2][1, 3, 5]");
  EXPECT_EQ(R("{{ dict(a=1).a }}"), "1");
  EXPECT_EQ(R("line1\n{{ raise_exception('Roles must alternate') }}"),
            "ERROR: line 2: Roles must alternate");
  RenderOptions opt;
  opt.now_unix_s = 86400 * 365;  // 1971-01-01 in UTC
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d') }}", json::object(), opt), "1971-01-01");
}

TEST(JinjaTest, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(R("a\n{% if x %}"),
            "PARSE ERROR: line 2: unexpected end of template: a block is not closed (expected 'elif')");
  EXPECT_EQ(R("\n\n{{ 1 + }}"), "PARSE ERROR: line 3: expected an expression, got '}}'");
  EXPECT_EQ(R("{% frob %}"), "PARSE ERROR: line 1: unknown statement 'frob'");
  EXPECT_EQ(R("{{ 'abc }}"), "PARSE ERROR: line 1: unterminated string literal");
  EXPECT_EQ(R("{{ x"), "PARSE ERROR: line 1: unexpected end of template, expected '}}'");
  EXPECT_EQ(R("{# never closed"), "PARSE ERROR: line 1: unterminated comment");
  EXPECT_EQ(R("{{ x @ y }}"), "PARSE ERROR: line 1: unexpected character '@' in a tag");
  EXPECT_EQ(R("{{ f() }}"), "ERROR: line 1: 'f' is undefined and cannot be called");
}

TEST(JinjaTest, GuardsAgainstRunawayTemplates) {
  // Deep nesting is a parse error, not a stack overflow.
  EXPECT_EQ(R("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").rfind("PARSE ERROR: line 1: "
                                                                           "the template nests too deeply", 0),
            0u);
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += "{% if true %}";
  EXPECT_EQ(R(nested).rfind("PARSE ERROR", 0), 0u);
  RenderOptions opt;
  opt.limits.max_output_bytes = 1000;
  EXPECT_EQ(R("{{ 'x' * 100000 }}", json::object(), opt),
            "ERROR: line 1: the rendered text would exceed 1000 bytes");
  EXPECT_EQ(R("{% for i in range(100000) %}xx{% endfor %}", json::object(), opt),
            "ERROR: line 1: the rendered text would exceed 1000 bytes");
  opt.limits.max_steps = 10000;
  EXPECT_EQ(R("{% for i in range(100) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
              json::object(), opt)
                .rfind("ERROR: line 1: the template ran for more than 10000 steps", 0),
            0u);
}

TEST(JinjaTest, IntegerEdgesAreErrorsNotUndefinedBehaviour) {
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_EQ(R("{{ -" + min + " }}"), "ERROR: line 1: integer overflow");
  EXPECT_EQ(R("{{ " + min + " // -1 }}"), "ERROR: line 1: integer overflow");
  EXPECT_EQ(R("{{ " + min + " | abs }}"), "ERROR: line 1: integer overflow");
  EXPECT_EQ(R("{{ 9223372036854775807 + 1 }}"), "ERROR: line 1: integer overflow");
  EXPECT_EQ(R("{{ 1e300 | int }}{{ '1e300' | int }}"), "00");
  EXPECT_EQ(R("{{ [1, 2, 3][1::9223372036854775807] }}{{ range(1, 9223372036854775807, "
              "9223372036854775807) | list }}"),
            "[2][1]");
  EXPECT_EQ(R("{{ 'abcd' * 4611686018427387904 }}").rfind("ERROR: line 1: the rendered text", 0),
            0u);
}

TEST(JinjaTest, ContextMustBeAnObject) {
  absl::StatusOr<Template> t = Template::Parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->Render(json::array()).ok());
}

}  // namespace
}  // namespace banyan::text::jinja
