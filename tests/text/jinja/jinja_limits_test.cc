// Limits of the Jinja interpreter against hostile templates (issue 43): loop bombs, range() as
// a lazy value, built-ins that would build big values, values and templates that nest without
// bound, and the checks Parse makes so that a broken template fails at start-up (unknown
// filters and tests, text that is not UTF-8). Each is an error naming what was refused, never a
// crash or a gigabyte (jinja_memory_test measures the memory).
#include <string>

#include "gtest/gtest.h"
#include "text/jinja/template.h"
#include "tests/text/jinja/render.h"

namespace banyan::text::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

constexpr char kSteps[] = "ERROR: line 1: the template ran for more than 5000000 steps";
constexpr char kNests[] = "PARSE ERROR: line 1: the template nests too deeply";

TEST(JinjaLimitsTest, RangeLoopBombsAreRefused) {
  EXPECT_EQ(R("{% for i in range(100000000) %}{% endfor %}").rfind(kSteps, 0), 0u);
  EXPECT_EQ(R("{% for i in range(1000000000) %}{% set x = i %}{% endfor %}").rfind(kSteps, 0), 0u);
  EXPECT_EQ(R("{% for i in range(10 ** 12) %}{% endfor %}").rfind(kSteps, 0), 0u);
  EXPECT_EQ(R("{% for i in range(100000000) %}{{ i }}{% endfor %}"),
            "ERROR: line 1: the rendered text would exceed 8388608 bytes");
  // A filtered loop keeps its items (loop.length counts them): a list within the item limit.
  EXPECT_EQ(R("{% for i in range(100000000) if i > 5 %}{% endfor %}"),
            "ERROR: line 1: a list of 262145 items would exceed the limit of 262144 items");
  // Small ranges still work, in every form.
  EXPECT_EQ(R("{% for i in range(5) %}{{ i }}{% endfor %}"), "01234");
  EXPECT_EQ(R("{% for i in range(10, 0, -3) %}{{ i }}{{ loop.revindex }}{{ loop.nextitem }},"
              "{% endfor %}"),
            "1047,734,421,11,");
  EXPECT_EQ(R("{% for i in range(6) if i is odd %}{{ i }}/{{ loop.length }} {% endfor %}"),
            "1/3 3/3 5/3 ");
  EXPECT_EQ(R("{% for i in range(0) %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(R("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
  // A million steps render (within the step limit).
  EXPECT_EQ(R("{% for i in range(1000000) %}{% endfor %}done"), "done");
}

// Copying or scanning a big value costs steps by its size: a loop that grows a string by
// concatenation (quadratic: 200,000 steps copied 200 GB and took 51 s before) or scans an
// 8 MB string each step stops at the step limit, in a fraction of a second.
TEST(JinjaLimitsTest, CopyingBigValuesOverAndOverCountsAsSteps) {
  EXPECT_EQ(R("{% set ns = namespace(s='') %}{% for i in range(200000) %}"
              "{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}")
                .rfind(kSteps, 0),
            0u);
  EXPECT_EQ(R("{% set s = 'x' * 8000000 %}{% for i in range(5000000) %}"
              "{% if s | length > 0 %}{% endif %}{% endfor %}")
                .rfind(kSteps, 0),
            0u);
  EXPECT_EQ(R("{% set s = 'x' * 8000000 %}{% for i in range(5000000) %}{{ s[5] }}{% endfor %}")
                .rfind(kSteps, 0),
            0u);
  EXPECT_EQ(R("{% set s = 'x' * 8000000 %}{% for i in range(5000000) %}"
              "{% if s.startswith('y') %}{% endif %}{% endfor %}")
                .rfind(kSteps, 0),
            0u);
  // Ordinary amounts are far from it.
  EXPECT_EQ(R("{% set ns = namespace(s='') %}{% for i in range(1000) %}"
              "{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}"),
            "10000");
}

TEST(JinjaLimitsTest, RangeIsLazyUntilItIsUsedAsAList) {
  EXPECT_EQ(R("{{ range(100000000) | length }}"), "100000000");
  EXPECT_EQ(R("{{ range(100000000)[-1] }} {{ 99999999 in range(100000000) }} "
              "{{ range(100000000) | first }} {{ range(100000000) | last }}"),
            "99999999 True 0 99999999");
  EXPECT_EQ(R("{{ range(100000000) | list | length }}"),
            "ERROR: line 1: a list of 100000000 items would exceed the limit of 262144 items");
  EXPECT_EQ(R("{{ range(100000000) | join(',') }}"),
            "ERROR: line 1: the rendered text would exceed 8388608 bytes");
  EXPECT_EQ(R("{{ range(100000000) | sort }}").rfind("ERROR: line 1: a list of 100000000", 0), 0u);
  EXPECT_EQ(R("{{ range(100000000) | select('odd') | list }}"),
            "ERROR: line 1: a list of 262145 items would exceed the limit of 262144 items");
  // Python's range: printed as itself, compared as its sequence, not JSON.
  EXPECT_EQ(
      R("{{ range(3) }} {{ range(1, 9, 2) }} {{ range(3) | list }} {{ range(3) | join('-') }}"),
      "range(0, 3) range(1, 9, 2) [0, 1, 2] 0-1-2");
  EXPECT_EQ(R("{{ range(0) == range(2, 2) }} {{ range(4) | sum }} {{ range(4) | reverse | list }} "
              "{{ range(3) is iterable }} {{ 3 in range(0, 10, 3) }} {{ 4 in range(0, 10, 3) }}"),
            "True 6 [3, 2, 1, 0] True True False");
  EXPECT_EQ(R("{{ range(3) | tojson }}"),
            "ERROR: line 1: Object of type range is not JSON serializable");
  EXPECT_EQ(R("{{ range(1, 9223372036854775807, 9223372036854775807) | list }}"), "[1]");
  EXPECT_EQ(R("{{ range(-9223372036854775807, 9223372036854775807) | length }}"),
            "ERROR: line 1: range() has more than 9223372036854775807 items");
  EXPECT_EQ(R("{{ range(-9223372036854775807, 9223372036854775807, 2) | length }}"),
            "9223372036854775807");
}

TEST(JinjaLimitsTest, BuiltinsRefuseBigValuesBeforeBuildingThem) {
  RenderOptions opt;
  opt.limits.max_output_bytes = 1000;
  const std::string too_big = "ERROR: line 1: the rendered text would exceed 1000 bytes";
  auto r = [&](const std::string& src) { return R(src, json::object(), opt); };
  EXPECT_EQ(r("{{ 'a' * 1001 }}"), too_big);
  EXPECT_EQ(r("{% set s = 'a' * 600 %}{{ (s ~ s) | length }}"), too_big);
  EXPECT_EQ(r("{% set s = 'a' * 600 %}{{ (s + s) | length }}"), too_big);
  EXPECT_EQ(r("{{ ['aaaaaaaaaa'] * 200 }}"), too_big);  // its str() is too long
  EXPECT_EQ(r("{{ (['abc'] * 400) | join(',') }}"), too_big);
  EXPECT_EQ(r("{{ ('a' * 500) | replace('a', 'bbb') | length }}"), too_big);
  EXPECT_EQ(r("{{ ('a' * 500).replace('', 'xy') | length }}"), too_big);
  EXPECT_EQ(r("{{ ('\\n' * 300) | indent('xxxx', true, true) | length }}"), too_big);
  EXPECT_EQ(r("{{ ('<' * 300) | escape | length }}"), too_big);
  EXPECT_EQ(r("{{ '{}{}'.format('a' * 600, 'b' * 600) | length }}"), too_big);
  EXPECT_EQ(r("{{ ['a' * 600, 'b' * 600] | tojson | length }}"), too_big);
  EXPECT_EQ(r("{{ ['a' * 600, 'b' * 600] | string | length }}"), too_big);
  EXPECT_EQ(r("{{ ('a' * 600) ~ ('b' * 600) }}"), too_big);
  EXPECT_EQ(r("{{ raise_exception(['a' * 600, 'b' * 600]) }}"), too_big);
  // Lists: counted in items against max_list_items before they are made.
  const std::string items = "a list of 300000 items would exceed the limit of 262144 items";
  EXPECT_EQ(R("{{ ([1] * 300000) | length }}"), "ERROR: line 1: " + items);
  EXPECT_EQ(R("{% set l = range(150000) | list %}{{ (l + l) | length }}"),
            "ERROR: line 1: a list of 300000 items would exceed the limit of 262144 items");
  EXPECT_EQ(R("{{ (',' * 300000).split(',') | length }}"),
            "ERROR: line 1: split() would make more than 262144 parts");
  EXPECT_EQ(R("{{ ('\\n' * 300000).splitlines() | length }}"),
            "ERROR: line 1: a list of 262145 items would exceed the limit of 262144 items");
  EXPECT_EQ(R("{{ (range(200000) | list) | map('string') | list | length }}"), "200000");
  // Within the limits the same built-ins work as Python's.
  EXPECT_EQ(
      r("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'héllo'[-4] }} {{ 'hèllo'[::-1] }} "
        "{{ 'héllo'[1::2] }} {{ 'héllo'[-2:] }} {{ 'xxhéyxx'.strip('xy') }} "
        "{{ 'ab'.replace('', '-') }} {{ 'ab'.replace('', '-', 2) }} {{ ' a  b ' | wordcount }}"),
      "ababab [1, 1] é ollèh él lo hé -a-b- -a-b 2");
  EXPECT_EQ(r("{{ 'a\nb' | indent(2, true) }}|{{ [1, 2, 3] | unique | list }}"),
            "  a\n  b|[1, 2, 3]");
}

TEST(JinjaLimitsTest, ValuesCannotNestWithoutBound) {
  // Each step wraps the last value: refused at the depth limit, not a crash when printed,
  // compared or freed.
  EXPECT_EQ(R("{% set x = [] %}{% for i in range(1000000) %}{% set x = [x] %}{% endfor %}"),
            "ERROR: line 1: a value nests more than 512 deep");
  EXPECT_EQ(R("{% set x = {} %}{% for i in range(1000000) %}{% set x = {'a': x} %}{% endfor %}"),
            "ERROR: line 1: a value nests more than 512 deep");
  EXPECT_EQ(R("{% set ns = namespace(x=[]) %}{% for i in range(1000000) %}{% set ns.x = [ns.x] %}"
              "{% endfor %}"),
            "ERROR: line 1: namespace attribute 'x' cannot hold a namespace (or a value nested "
            "256 deep)");
  // A namespace cannot hold itself: no reference cycle (which would leak every render).
  EXPECT_EQ(R("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self | tojson }}"),
            "ERROR: line 1: namespace attribute 'self' cannot hold a namespace (or a value nested "
            "256 deep)");
  EXPECT_EQ(R("{% set ns = namespace() %}{% set ns2 = namespace(inner=[ns]) %}"),
            "ERROR: line 1: namespace attribute 'inner' cannot hold a namespace (or a value nested "
            "256 deep)");
  // A deep context is refused the same way.
  json deep = json::array();
  for (int i = 0; i < 600; ++i) deep = json::array({deep});
  EXPECT_EQ(R("{{ x | length }}", {{"x", deep}}), "ERROR: a value nests more than 512 deep");
  // Shallow nesting still works.
  EXPECT_EQ(R("{% set ns = namespace(x=[]) %}{% for i in range(3) %}{% set ns.x = ns.x + [i] %}"
              "{% endfor %}{{ ns.x }} {{ [[1], {'a': [2]}] | tojson }}"),
            "[0, 1, 2] [[1], {\"a\": [2]}]");
}

TEST(JinjaLimitsTest, DeepTemplatesAreErrorsNotStackOverflows) {
  const int n = 100000;
  EXPECT_EQ(R("{{ " + Repeat("(", n) + "1" + Repeat(")", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R(Repeat("{% if true %}", n) + "x" + Repeat("{% endif %}", n)).rfind(kNests, 0), 0u);
  EXPECT_EQ(R(Repeat("{% for i in [1] %}", n)).rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 'x'" + Repeat(" | trim", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 1" + Repeat(" + 1", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 'a'" + Repeat(" ~ 'a'", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 1" + Repeat(" == 1", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ true" + Repeat(" and true", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ x" + Repeat(".a", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ x" + Repeat("[0]", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ f" + Repeat("()", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ " + Repeat("not ", n) + "x }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ " + Repeat("- ", n) + "1 }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 1" + Repeat(" if true else 1", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ 1" + Repeat(" is number", n) + " }}").rfind(kNests, 0), 0u);
  EXPECT_EQ(R("{{ [" + Repeat("[", n) + Repeat("]", n) + "] }}").rfind(kNests, 0), 0u);
  // Chains as long as real templates write them are fine.
  EXPECT_EQ(R("{{ 1" + Repeat(" + 1", 50) + " }}{{ ' x ' | trim | upper | lower }}"), "51x");
  // At run time, macros that recurse through deep expressions stop at the nesting limit.
  RenderOptions opt;
  opt.limits.max_call_depth = 100000;
  EXPECT_EQ(R("{% macro m(n) %}{{ ((m(n + 1))) }}{% endmacro %}{{ m(0) }}", json::object(), opt)
                .rfind("ERROR: line 1: the template nests too deeply at run time (more than 2000 "
                       "evaluations or 2048 KiB of stack",
                       0),
            0u);
}

TEST(JinjaLimitsTest, UnknownFiltersAndTestsAreParseErrors) {
  // Found when the template is parsed (at start-up), even in a branch no request takes.
  EXPECT_EQ(R("ok\n{% if false %}{{ x | frobnicate }}{% endif %}"),
            "PARSE ERROR: line 2: unknown filter 'frobnicate'");
  EXPECT_EQ(R("{{ x | trim | nope(1) }}"), "PARSE ERROR: line 1: unknown filter 'nope'");
  EXPECT_EQ(R("{% filter nope %}x{% endfilter %}"), "PARSE ERROR: line 1: unknown filter 'nope'");
  EXPECT_EQ(R("{{ x is frobnicated }}"), "PARSE ERROR: line 1: unknown test 'frobnicated'");
  EXPECT_EQ(R("{{ x is not nope(2) }}"), "PARSE ERROR: line 1: unknown test 'nope'");
  EXPECT_EQ(R("{{ xs | map('nope') | list }}"), "PARSE ERROR: line 1: unknown filter 'nope'");
  EXPECT_EQ(R("{{ xs | select('nope') | list }}"), "PARSE ERROR: line 1: unknown test 'nope'");
  EXPECT_EQ(R("{{ xs | rejectattr('a', 'nope') | list }}"),
            "PARSE ERROR: line 1: unknown test 'nope'");
  // Known ones parse; map(attribute=...) names no filter.
  EXPECT_EQ(R("{{ xs | map(attribute='a') | select('defined') | rejectattr('a', 'none') | "
              "map('string') | list | length }}",
              {{"xs", json::array({{{"a", 1}}})}}),
            "1");
}

TEST(JinjaLimitsTest, TemplatesMustBeUtf8) {
  EXPECT_EQ(R("ok\n{{ 'caf\xe9' }}"),
            "PARSE ERROR: line 2: the template is not valid UTF-8 (byte 10)");
  EXPECT_EQ(R("\xc0\xaf"), "PARSE ERROR: line 1: the template is not valid UTF-8 (byte 0)");
  EXPECT_EQ(R("a\xed\xa0\x80"), "PARSE ERROR: line 1: the template is not valid UTF-8 (byte 1)");
  EXPECT_EQ(R("\xf4\x90\x80\x80"), "PARSE ERROR: line 1: the template is not valid UTF-8 (byte 0)");
  EXPECT_EQ(R("abc\xe2\x82"), "PARSE ERROR: line 1: the template is not valid UTF-8 (byte 3)");
  EXPECT_EQ(R("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
}

}  // namespace
}  // namespace banyan::text::jinja
