// JSON Schema → grammar: which instances the grammar accepts (canonical JSON as a model would
// write it), and the refusals, each naming the keyword and where it is.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/text/grammar/grammar_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"

namespace banyan::text::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const CompiledGrammar> FromSchema(const std::string& schema) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(ojson::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return MustCompile(*g);
}

std::string Error(const std::string& schema) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(ojson::parse(schema));
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

struct Case {
  const char* schema;
  std::vector<const char*> yes;
  std::vector<const char*> no;
};

TEST(JsonSchemaTest, AcceptsExactlyTheCanonicalInstances) {
  const std::vector<Case> cases = {
      {R"({"type":"integer"})", {"0", "-12", "123456789"}, {"01", "1.5", "\"1\"", "-", ""}},
      {R"({"type":"number"})", {"0", "-1.25", "3e10", "2.5E-3"}, {".5", "1.", "1e", "+1"}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("a\"c")", "\"\xC3\xA9\xC3\xA9\""},
       {R"("a")", R"("abcd")", "\"a\nb\"", R"("\x")"}},
      {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1", "nul"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1"}},
      {R"({"enum":["red",2,null,{"a":[1]}]})",
       {R"("red")", "2", "null", R"({"a":[1]})"},
       {R"("blue")", "3", R"({"a":[2]})"}},
      {R"({"const":"x"})", {R"("x")"}, {R"("y")"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
           "required":["b"]})",
       {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({ "a": 1 , "b":"x" })"},
       {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x",})", R"({"b":"x","c":1})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
           "c":{"type":"integer"}}})",
       {"{}", R"({"b":2})", R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})"},
       {R"({,"b":2})", R"({"c":3,"a":1})"}},
      {R"({"type":"object","additionalProperties":{"type":"boolean"}})",
       {"{}", R"({"any key":true,"k2":false})"},
       {R"({"k":1})"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
       {"[]", "[1,2,3,4]", "[1,]", R"(["a"])"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", R"(["a"])", R"(["a",1])"},
       {R"(["a",1,2])", "[1]"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#"}}]})",
       {"1", "[]", "[1,[2,[]]]"},
       {R"(["x"])", "[[1]"}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-28")", R"("1999-12-31")"},
       {R"("2024-02-30")", R"("2024-13-01")", R"("2024-04-31")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")"}},
      {R"({"type":"string","format":"ipv4"})",
       {R"("192.168.0.1")", R"("0.0.0.0")"},
       {R"("256.1.1.1")", R"("01.1.1.1")"}},
      {R"({"type":"integer","minimum":-3,"exclusiveMaximum":12})",
       {"-3", "0", "11"}, {"-4", "12", "1.5", "-0"}},
      {R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
       {"0", "-123456789012345"}, {"1e3", "01"}},
      {R"({"type":"number","minimum":0,"maximum":1})",
       {"0", "1", "0.25", "0.999"}, {"1.5", "-0.5", "2", "1e-1"}},
      {R"({"type":"number","exclusiveMinimum":-2.5,"maximum":-1})",
       {"-2", "-1", "-1.75"}, {"-2.5", "-0.5", "0", "-3"}},
      {R"({"type":"string","pattern":"^[a-z]+-\\d{2}$"})",
       {R"("ab-12")"}, {R"("ab-1")", R"("Ab-12")", R"("ab-123")"}},
      {R"({"type":"string","pattern":"x\"y"})",
       {R"("x\"y")", R"("aax\"ybb")"}, {R"("xy")"}},
      {R"({"type":"integer","multipleOf":5})",
       {"0", "5", "-35", "100000000000000"}, {"3", "51", "-1", "05", "5.0", "1000000000000000"}},
      {R"({"type":"integer","multipleOf":7,"minimum":10,"maximum":50})",
       {"14", "49", "35"}, {"7", "56", "0", "15", "-14"}},
      {R"({"type":"number","multipleOf":3,"exclusiveMinimum":-7})",
       {"-6", "0", "999"}, {"-9", "4", "1.5", "3e1"}},
      {R"({"multipleOf":4})", {"8", R"("any")", "null"}, {"6"}},
      // Decimal multipleOf, exact: 0.07 is a multiple of 0.01 (in doubles 0.07 / 0.01 is
      // 7.000000000000001), 0.3 of 0.1.
      {R"({"type":"number","multipleOf":0.01})",
       {"0", "0.07", "-12.5", "3", "100.99", "0.3"},
       {"0.001", "0.075", "1e-2", "0.070", ".5", "1."}},
      {R"({"type":"number","multipleOf":0.1})", {"0.3", "7", "-0.9"}, {"0.35", "0.30"}},
      {R"({"type":"number","multipleOf":1.5,"minimum":0,"maximum":10})",
       {"0", "1.5", "4.5", "9"}, {"1", "2.5", "10.5", "-1.5", "4.50"}},
      {R"({"type":"number","multipleOf":0.25,"minimum":-1,"maximum":1})",
       {"-0.75", "-1", "0.25", "0.5", "1", "0"}, {"-1.25", "0.2", "1.25", "0.125"}},
      {R"({"type":"integer","multipleOf":2.5})", {"0", "5", "-15"}, {"2.5", "7", "3"}},
      {R"({"type":"number","multipleOf":0.0001})", {"0.0075", "1.2345"}, {"0.00751"}},
      {R"({"type":"number","multipleOf":1e-2})", {"0.07"}, {"0.075"}},
      {R"({"type":"string","format":"email"})",
       {R"("a.b+c@example.com")", R"("X_9@mail.sub-d.org")", R"("o'neil@a.io")"},
       {R"("a..b@x.com")", R"(".a@x.com")", R"("a@localhost")", R"("a@-x.com")",
        R"("a@x-.com")", R"("a b@x.com")", R"("@x.com")"}},
      {R"({"type":"string","format":"uuid","pattern":"^[0-9a-f-]+$"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123E4567-e89b-12d3-a456-426614174000")", R"("123e4567e89b12d3a456426614174000")"}},
      {R"({"type":"string","format":"date","pattern":"^20"})",
       {R"("2024-02-28")"}, {R"("1999-12-31")", R"("20")", R"("2024-02-30")"}},
      {R"({})", {R"({"a":[1,{"b":null}],"c":"\u00e9"})", "[]", "-1.5e3", "true"},
       {R"({"a":})", "[1,]"}},
  };
  for (const Case& c : cases) {
    auto g = FromSchema(c.schema);
    ASSERT_NE(g, nullptr) << c.schema;
    for (const char* text : c.yes) EXPECT_TRUE(Matches(g, text)) << c.schema << " : " << text;
    for (const char* text : c.no) EXPECT_FALSE(Matches(g, text)) << c.schema << " : " << text;
  }
}

// Found by grammar_ajv_oracle: an escaped surrogate pair is one character for minLength, as
// validators count it, and a lone surrogate is never written.
TEST(JsonSchemaTest, EscapedSurrogatePairIsOneCharacter) {
  auto g = FromSchema(R"({"type":"string","minLength":2,"maxLength":2})");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Matches(g, R"("\ud83d\ude00")"));
  EXPECT_TRUE(Matches(g, R"("a\ud83d\ude00")"));
  EXPECT_TRUE(Matches(g, R"("\uD83D\uDE00\u00e9")"));
  EXPECT_TRUE(Matches(g, R"("\u00e9\uD7FF")"));
  EXPECT_FALSE(Matches(g, R"("\ud83da")"));
  EXPECT_FALSE(Matches(g, R"("a\ude00")"));
  EXPECT_FALSE(Matches(g, R"("\ude00\ud83d")"));
}

// Found by grammar_ajv_oracle: schemas whose keywords the grammar would have ignored, accepting
// values a validator refuses. Each either compiles to what validates or is refused by name.
TEST(JsonSchemaTest, NoKeywordIsIgnoredBesideEnumOneOfOrRequired) {
  EXPECT_NE(Error(R"({"type":"string","enum":["a","abc"],"minLength":2})")
                .find("'minLength' beside 'enum' at #"),
            std::string::npos);
  EXPECT_NE(Error(R"({"const":"x","enum":["y"]})").find("'enum' beside 'const'"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"object","required":["k"],"enum":[{"j":2}]})")
                .find("'required' beside 'enum'"),
            std::string::npos);
  // oneOf: only branches no value can match twice.
  EXPECT_NE(Error(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})")
                .find("'oneOf' at # is not supported: branches 0 and 1"),
            std::string::npos);
  EXPECT_NE(Error(R"({"oneOf":[{"properties":{"a":{}}},{"type":"string"}]})").find("'oneOf'"),
            std::string::npos);
  EXPECT_NE(Error(R"({"oneOf":[{"enum":[1,{"a":1,"b":2}]},{"enum":[{"b":2,"a":1}]}]})")
                .find("'oneOf'"),
            std::string::npos);
  auto typed = FromSchema(R"({"oneOf":[{"type":"string"},{"type":"null"}]})");
  ASSERT_NE(typed, nullptr);
  EXPECT_TRUE(Matches(typed, "null"));
  auto tagged = FromSchema(R"({"$defs":{
      "a":{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
           "required":["kind"]},
      "b":{"type":"object","properties":{"kind":{"enum":["b","c"]}},"required":["kind"]}},
    "oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/b"}]})");
  ASSERT_NE(tagged, nullptr);
  EXPECT_TRUE(Matches(tagged, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(Matches(tagged, R"({"kind":"c"})"));
  // A required key outside properties takes additionalProperties' schema.
  auto extra = FromSchema(R"({"type":"object","properties":{"a":{"type":"string"}},
      "required":["b"],"additionalProperties":{"type":"integer"}})");
  ASSERT_NE(extra, nullptr);
  EXPECT_TRUE(Matches(extra, R"({"b":1})"));
  EXPECT_FALSE(Matches(extra, R"({"b":"x"})"));
  auto map = FromSchema(R"({"additionalProperties":{"type":"boolean"},"required":["on"]})");
  ASSERT_NE(map, nullptr);
  EXPECT_TRUE(Matches(map, R"({"on":true})"));
  EXPECT_FALSE(Matches(map, R"({"on":1})"));
  EXPECT_NE(Error(R"({"properties":{"a":{}},"required":["b"],"additionalProperties":false})")
                .find("'required' at # names 'b'"),
            std::string::npos);
  // Number formats.
  auto int32 = FromSchema(R"({"type":"integer","format":"int32"})");
  ASSERT_NE(int32, nullptr);
  EXPECT_TRUE(Matches(int32, "-999999999"));
  EXPECT_FALSE(Matches(int32, "2147483648"));
  EXPECT_NE(Error(R"({"type":"number","format":"percent"})").find("number format 'percent'"),
            std::string::npos);
  // A nested $id would change what "#" means inside it.
  EXPECT_NE(Error(R"({"properties":{"c":{"$id":"https://example.com/c","items":{"$ref":"#"}}}})")
                .find("'$id' at #/properties/c"),
            std::string::npos);
}

TEST(JsonSchemaTest, RefusalsNameTheKeywordAndItsPath) {
  EXPECT_NE(Error(R"({"type":"object","properties":{"age":{"type":"number","multipleOf":0.123456789}}})")
                .find("'multipleOf' at #/properties/age is 0.123456789: supported are whole "
                      "numbers from 1 to 1000 and decimals of at most 6 places"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"number","multipleOf":10.01})").find("up to 1000"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"integer","multipleOf":1001})").find("from 1 to 1000"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"integer","multipleOf":0})").find("greater than 0"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"integer","multipleOf":10,"minimum":1,"maximum":9})")
                .find("'multipleOf' at #: no string matches both"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"string","format":"uuid","pattern":"^x"})")
                .find("'pattern' with 'format' at #: no string matches both"),
            std::string::npos);
  EXPECT_NE(Error(R"j({"type":"string","format":"date","pattern":"(?=2)"})j").find("lookaround"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"object","properties":{"a/b":{"not":{}}}})")
                .find("'not' at #/properties/a~1b"),
            std::string::npos);
  EXPECT_NE(Error(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(Error(R"({"$ref":"https://example.com/s.json"})").find("not supported"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"string","format":"hostname"})").find("format 'hostname'"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"array","items":false,"minItems":1})").find("no number of items"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(Error(R"({"enum":[1,2],"type":"string"})").find("satisfies"), std::string::npos);
  EXPECT_NE(Error(R"({"type":"string","maxLength":100000000})").find("maxLength"),
            std::string::npos);
  EXPECT_NE(Error("false").find("no value"), std::string::npos);
  std::string deep = R"({"type":"array","items":)";
  std::string schema;
  for (int i = 0; i < 40; ++i) schema += deep;
  schema += "{}";
  for (int i = 0; i < 40; ++i) schema += "}";
  EXPECT_NE(Error(schema).find("nests more than"), std::string::npos);
}

TEST(JsonSchemaTest, SelfReferenceWithoutProgressIsRefused) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(ojson::parse(R"({"$ref":"#"})"));
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(*g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("left-recursive"), std::string::npos) << c.status();
}

TEST(JsonSchemaTest, AnyJsonObject) {
  absl::StatusOr<CompiledGrammar> c = CompiledGrammar::Compile(AnyJsonObjectGrammar());
  ASSERT_TRUE(c.ok()) << c.status();
  auto g = std::make_shared<const CompiledGrammar>(*std::move(c));
  EXPECT_TRUE(Matches(g, R"({"a":{"b":[1,2,{}]}})"));
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_FALSE(Matches(g, "[]"));
  EXPECT_FALSE(Matches(g, "1"));
}

}  // namespace
}  // namespace banyan::text::grammar
