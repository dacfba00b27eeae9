// response_format (structural tags too), guided_json, guided_regex, guided_choice,
// guided_grammar / grammar and structured_outputs through the HTTP request parser: what
// compiles into a
// constraint on the request, what is refused with a 400 naming the field (or, for a schema
// keyword outside the supported subset, the keyword and its JSON pointer), and the compile
// cache shared by requests.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/server/http/request_fixture.h"
#include "server/http/openai_request.h"
#include "server/common/structured_outputs.h"
#include "text/grammar/matcher.h"

namespace banyan::server {
namespace {

using http::Json;

class StructuredOutputRequestTest : public BundledRequestTest {
 protected:
  void SetUp() override {
    BundledRequestTest::SetUp();
    ctx_.structured_outputs = std::make_shared<StructuredOutputs>(tokenizer_, /*cache_entries=*/2);
  }
  absl::StatusOr<http::ParsedGeneration> Chat(const std::string& extra) {
    const std::string body =
        R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
    return http::ParseChatRequest(Json::parse(body), ctx_, body);
  }
  absl::StatusOr<http::ParsedGeneration> Completion(const std::string& extra) {
    const std::string body = R"({"prompt": "Once", )" + extra + "}";
    return http::ParseCompletionRequest(Json::parse(body), ctx_, body);
  }
};

using StructuralTagRequestTest = StructuredOutputRequestTest;

TEST_F(StructuredOutputRequestTest, JsonSchemaCompilesInTheClientsPropertyOrder) {
  // "b" before "a": the order sent, not the sorted order of the parsed body.
  auto r = Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "strict": true, "schema": {"type": "object", "properties": {"b": {"type": "integer"},
      "a": {"enum": ["p", "q"]}}, "required": ["b", "a"]}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Accepts(*r, R"({"b": 1, "a": "p"})"));
  EXPECT_FALSE(Accepts(*r, R"({"a": "p", "b": 1})"));
  EXPECT_FALSE(Accepts(*r, R"({"b": 1, "a": "z"})"));
}

TEST_F(StructuredOutputRequestTest, JsonObjectAndText) {
  auto r = Chat(R"("response_format": {"type": "json_object"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Accepts(*r, R"({"any": [1, {"x": null}]})"));
  EXPECT_FALSE(Accepts(*r, "[1]"));
  auto t = Chat(R"("response_format": {"type": "text"})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->inputs[0].constraint, nullptr);
  auto none = Chat(R"("temperature": 0)");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->inputs[0].constraint, nullptr);
}

TEST_F(StructuredOutputRequestTest, GuidedJsonAsObjectOrStringOnBothEndpoints) {
  auto obj = Completion(R"("n": 2, "prompt": ["a", "b"], "guided_json": {"type": "object",
      "properties": {"k": {"type": "boolean"}}, "required": ["k"]})");
  ASSERT_TRUE(obj.ok()) << obj.status();
  ASSERT_EQ(obj->inputs.size(), 2u);
  EXPECT_EQ(obj->inputs[0].constraint, obj->inputs[1].constraint) << "one compile per request";
  EXPECT_TRUE(Accepts(*obj, R"({"k": true})"));
  auto str = Chat(R"("guided_json": "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}")");
  ASSERT_TRUE(str.ok()) << str.status();
  EXPECT_TRUE(Accepts(*str, "[1, 2]"));
  EXPECT_FALSE(Accepts(*str, R"(["1"])"));
  auto rf = Completion(R"("response_format": {"type": "json_object"})");
  ASSERT_TRUE(rf.ok()) << rf.status();
  EXPECT_NE(rf->inputs[0].constraint, nullptr);
}

TEST_F(StructuredOutputRequestTest, BadShapesNameTheField) {
  struct Case {
    std::string extra;
    std::string param;
  };
  const Case cases[] = {
      {R"("response_format": "json")", "response_format"},
      {R"("response_format": {"type": 3})", "response_format"},
      {R"("response_format": {"type": "xml"})", "response_format.type"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})",
       "response_format.json_schema.name"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
          "strict": "yes", "schema": {}}})",
       "response_format.json_schema.strict"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})",
       "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
          "schema": [1]}})",
       "response_format.json_schema.schema"},
      {R"("guided_json": 5)", "guided_json"},
      {R"("guided_json": "{not json")", "guided_json"},
      {R"("guided_json": {"type": "object"}, "response_format": {"type": "json_object"})",
       "guided_json"},
  };
  for (const Case& c : cases) {
    for (bool chat : {true, false}) {
      auto r = chat ? Chat(c.extra) : Completion(c.extra);
      ASSERT_FALSE(r.ok()) << c.extra;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.extra;
      EXPECT_EQ(StatusParam(r.status()), c.param) << c.extra << " " << r.status();
    }
  }
}

TEST_F(StructuredOutputRequestTest, GuidedRegexMatchesTheWholeOutputOnBothEndpoints) {
  auto chat = Chat(R"("guided_regex": "[0-9]{3}-[a-z]+")");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(Accepts(*chat, "123-abc"));
  EXPECT_FALSE(Accepts(*chat, "12-abc"));
  EXPECT_FALSE(Accepts(*chat, "x123-abc")) << "whole output, not a search";
  EXPECT_FALSE(Accepts(*chat, "123-"));
  auto comp = Completion(R"("n": 2, "prompt": ["a", "b"], "guided_regex": "(yes|no)!?")");
  ASSERT_TRUE(comp.ok()) << comp.status();
  ASSERT_EQ(comp->inputs.size(), 2u);
  EXPECT_EQ(comp->inputs[0].constraint, comp->inputs[1].constraint);
  EXPECT_TRUE(Accepts(*comp, "no!"));
  EXPECT_FALSE(Accepts(*comp, "maybe"));
}

TEST_F(StructuredOutputRequestTest, GuidedChoiceIsExactlyOneOfTheStrings) {
  // Regex metacharacters and JSON escapes are plain text in a choice.
  auto r = Chat(R"("guided_choice": ["a.b", "(x|y)*", "say \"hi\"", "ünï"])");
  ASSERT_TRUE(r.ok()) << r.status();
  for (const char* choice : {"a.b", "(x|y)*", "say \"hi\"", "ünï"}) {
    EXPECT_TRUE(Accepts(*r, choice)) << choice;
  }
  for (const char* other : {"", "aXb", "x", "xy", "a.b(x|y)*", "a.", "say hi"}) {
    EXPECT_FALSE(Accepts(*r, other)) << other;
  }
  auto c = Completion(R"("guided_choice": ["positive", "negative"])");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(Accepts(*c, "negative"));
  EXPECT_FALSE(Accepts(*c, "neg"));
}

TEST_F(StructuredOutputRequestTest, NestedStructuredOutputsForm) {
  auto regex = Chat(R"("structured_outputs": {"regex": "id-[0-9]+", "grammar": null,
      "disable_fallback": false})");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_TRUE(Accepts(*regex, "id-42"));
  EXPECT_FALSE(Accepts(*regex, "id-"));
  auto choice = Completion(R"("structured_outputs": {"choice": ["red", "green"]})");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_TRUE(Accepts(*choice, "green"));
  EXPECT_FALSE(Accepts(*choice, "blue"));
  auto json = Chat(R"("structured_outputs": {"json": {"type": "object", "properties":
      {"k": {"type": "boolean"}}, "required": ["k"]}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(Accepts(*json, R"({"k": false})"));
  EXPECT_FALSE(Accepts(*json, R"({"k": 1})"));
  auto object = Completion(R"("structured_outputs": {"json_object": true})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(Accepts(*object, R"({"a": 1})"));
  EXPECT_FALSE(Accepts(*object, "1"));
}

TEST_F(StructuredOutputRequestTest, GuidedRegexChoiceAndNestedFormRefusals) {
  struct Case {
    std::string extra;
    std::string param;
    std::string says;  // a part of the message
  };
  const Case cases[] = {
      {R"("guided_regex": 5)", "guided_regex", "non-empty string"},
      {R"("guided_regex": "")", "guided_regex", "non-empty string"},
      {R"("guided_regex": "(a)\\1")", "guided_regex", "backreference"},
      {R"("guided_regex": "(?=a)a")", "guided_regex", "lookaround"},
      {R"("guided_regex": "(ab")", "guided_regex", "guided_regex cannot be compiled"},
      {R"("guided_choice": [])", "guided_choice", "non-empty list of strings"},
      {R"("guided_choice": "yes")", "guided_choice", "non-empty list of strings"},
      {R"("guided_choice": ["yes", 1])", "guided_choice", "guided_choice[1] is not a string"},
      // The second in the fixed order response_format, guided_json, guided_regex,
      // guided_choice, structured_outputs is named, whatever the body's order.
      {R"("guided_choice": ["a"], "guided_regex": "a")", "guided_choice",
       "guided_choice and guided_regex"},
      {R"("guided_json": {"type": "object"}, "guided_choice": ["a"])", "guided_choice",
       "both constrain"},
      {R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex",
       "guided_regex and response_format"},
      {R"("guided_regex": "a", "structured_outputs": {"regex": "b"})", "structured_outputs",
       "both constrain"},
      {R"("structured_outputs": {"regex": "a", "choice": ["a"]})", "structured_outputs.choice",
       "structured_outputs.choice and structured_outputs.regex"},
      {R"("structured_outputs": {"structural_tag": "{}"})",
       "structured_outputs.structural_tag.structures", "non-empty array"},
      {R"("structured_outputs": {"regex": "a", "whitespace_pattern": " "})",
       "structured_outputs.whitespace_pattern", "not supported"},
      {R"("structured_outputs": "a+")", "structured_outputs", "must be an object"},
      {R"("structured_outputs": {"choice": [3]})", "structured_outputs.choice",
       "structured_outputs.choice[0] is not a string"},
      {R"("structured_outputs": {"regex": "a{2,1}"})", "structured_outputs.regex",
       "cannot be compiled"},
  };
  for (const Case& c : cases) {
    for (bool chat : {true, false}) {
      auto r = chat ? Chat(c.extra) : Completion(c.extra);
      ASSERT_FALSE(r.ok()) << c.extra;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.extra;
      EXPECT_EQ(StatusParam(r.status()), c.param) << c.extra << " " << r.status();
      EXPECT_NE(r.status().message().find(c.says), std::string::npos)
          << c.extra << " " << r.status();
    }
  }
  // A structured_outputs object that asks for nothing constrains nothing.
  auto none = Chat(R"("structured_outputs": {"regex": null, "disable_any_whitespace": false})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->inputs[0].constraint, nullptr);
}

// A structural tag's grammar reads its trigger (TokenConstraint::grammar_reads_trigger): this is
// the text from a trigger's first byte to its structure's end.
bool AcceptsTagged(const http::ParsedGeneration& p, std::string_view text) {
  const auto& c = p.inputs.at(0).constraint;
  if (c == nullptr || !c->grammar_reads_trigger) return false;
  text::grammar::Matcher m(c->grammar);
  return m.Accept(text) && m.CanEnd();
}

constexpr char kWeatherTag[] = R"({"type": "structural_tag",
    "structures": [{"begin": "<function=get_weather>", "schema": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
      "required": ["city"]}, "end": "</function>"},
      {"begin": "<function=add>", "schema": {"type": "object", "properties":
      {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
      "end": "</function>"},
      {"begin": "<note>", "end": ""}],
    "triggers": ["<function=", "<note>", "<unused>", "<function="]})";

TEST_F(StructuralTagRequestTest, StructuresAfterTheirTriggersOnBothEndpoints) {
  for (bool chat : {true, false}) {
    auto r = chat ? Chat(absl::StrCat(R"("response_format": )", kWeatherTag))
                  : Completion(absl::StrCat(R"("response_format": )", kWeatherTag));
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& c = r->inputs.at(0).constraint;
    ASSERT_NE(c, nullptr);
    // Unused and repeated triggers are dropped; free again after each structure.
    EXPECT_EQ(c->triggers, (std::vector<std::string>{"<function=", "<note>"}));
    EXPECT_TRUE(c->grammar_reads_trigger);
    EXPECT_FALSE(c->trigger_once);
    EXPECT_FALSE(c->best_effort) << "asked for: refused where it cannot apply, never dropped";
    EXPECT_TRUE(AcceptsTagged(*r, R"(<function=get_weather>{"city": "Paris"}</function>)"));
    EXPECT_TRUE(
        AcceptsTagged(*r, R"(<function=get_weather>{"city": "Oslo", "unit": "c"}</function>)"));
    EXPECT_TRUE(AcceptsTagged(*r, R"(<function=add>{"a": 1, "b": -2}</function>)"));
    EXPECT_TRUE(AcceptsTagged(*r, R"(<note>[1, "x", null])"));
    EXPECT_FALSE(AcceptsTagged(*r, R"(<function=get_weather>{"unit": "c"}</function>)"));
    EXPECT_FALSE(AcceptsTagged(*r, R"(<function=add>{"a": 1}</function>)"));
    EXPECT_FALSE(AcceptsTagged(*r, R"(<function=nope>{}</function>)"));
    EXPECT_FALSE(AcceptsTagged(*r, R"(<function=add>{"a": 1, "b": 2})"));
    EXPECT_FALSE(AcceptsTagged(*r, R"(free text)"));
  }
  // vLLM's structured_outputs.structural_tag: the same, as an object or as JSON text.
  auto obj = Chat(absl::StrCat(R"("structured_outputs": {"structural_tag": )", kWeatherTag, "}"));
  ASSERT_TRUE(obj.ok()) << obj.status();
  EXPECT_TRUE(AcceptsTagged(*obj, R"(<function=add>{"a": 1, "b": 2}</function>)"));
  auto text = Completion(absl::StrCat(R"("structured_outputs": {"structural_tag": )",
                                      Json(std::string(kWeatherTag)).dump(), "}"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(AcceptsTagged(*text, R"(<function=add>{"a": 1, "b": 2}</function>)"));
  EXPECT_EQ(obj->inputs[0].constraint->grammar, text->inputs[0].constraint->grammar)
      << "one compile for the same structures";
}

TEST_F(StructuralTagRequestTest, RefusalsNameTheField) {
  struct Case {
    std::string tag;
    std::string param;  // under response_format
    std::string says;
  };
  const std::string ok_structure =
      R"({"begin": "<f=a>", "schema": {"type": "object"}, "end": "</f>"})";
  std::string many_structures = "[";
  for (int i = 0; i < 129; ++i) absl::StrAppend(&many_structures, i ? "," : "", ok_structure);
  many_structures += "]";
  std::string many_triggers = "[";
  for (int i = 0; i < 129; ++i) absl::StrAppend(&many_triggers, i ? "," : "", "\"<f", i, "\"");
  many_triggers += "]";
  const std::string huge_end(300 << 10, 'x');
  const Case cases[] = {
      {R"({"type": "structural_tag", "triggers": ["<f"]})", ".structures", "non-empty array"},
      {R"({"type": "structural_tag", "structures": [], "triggers": ["<f"]})", ".structures",
       "non-empty array"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": )", many_structures,
                    R"(, "triggers": ["<f"]})"),
       ".structures", "at most 128"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [)", ok_structure,
                    R"(], "triggers": )", many_triggers, "}"),
       ".triggers", "at most 128"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [)", ok_structure, "]}"),
       ".triggers", "non-empty array"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [)", ok_structure,
                    R"(], "triggers": [""]})"),
       ".triggers[0]", "non-empty string"},
      {R"({"type": "structural_tag", "structures": [{"schema": {}, "end": "</f>"}],
          "triggers": ["<f"]})",
       ".structures[0].begin", "non-empty string"},
      {R"({"type": "structural_tag", "structures": [{"begin": "<f=a>", "schema": {}}],
          "triggers": ["<f"]})",
       ".structures[0].end", "must be a string"},
      {R"({"type": "structural_tag", "structures": [{"begin": "<f=a>", "schema": [1],
          "end": ""}], "triggers": ["<f"]})",
       ".structures[0].schema", "JSON Schema object"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [)", ok_structure,
                    R"(, {"begin": "[x]", "end": ""}], "triggers": ["<f"]})"),
       ".structures[1].begin", "starts with none of the triggers"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [)", ok_structure,
                    R"(, {"begin": "<g>", "schema": {"type": "object", "patternProperties":
                    {}}, "end": ""}], "triggers": ["<"]})"),
       ".structures[1].schema", "patternProperties"},
      {absl::StrCat(R"({"type": "structural_tag", "structures": [{"begin": "<f=a>", "end": ")",
                    huge_end, R"("}], "triggers": ["<f"]})"),
       "", "the limit is"},
      {R"({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<f"],
          "tags": [{"begin": "<f=a>", "content": {"type": "json_schema", "json_schema": {}},
          "end": "</f>"}]}})",
       ".format", "structures"},
  };
  for (const Case& c : cases) {
    for (bool chat : {true, false}) {
      const std::string extra = absl::StrCat(R"("response_format": )", c.tag);
      auto r = chat ? Chat(extra) : Completion(extra);
      ASSERT_FALSE(r.ok()) << c.tag.substr(0, 200);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.tag.substr(0, 200);
      EXPECT_EQ(StatusParam(r.status()), "response_format" + c.param)
          << c.tag.substr(0, 200) << " " << r.status().message().substr(0, 300);
      EXPECT_NE(r.status().message().find(c.says), std::string::npos)
          << c.tag.substr(0, 200) << " " << r.status().message().substr(0, 300);
    }
  }
  // Under structured_outputs.structural_tag the same checks name that field; text that is no
  // JSON is refused there too.
  auto fmt = Chat(R"("structured_outputs": {"structural_tag": {"format": {"type": "or"}}})");
  ASSERT_FALSE(fmt.ok());
  EXPECT_EQ(StatusParam(fmt.status()), "structured_outputs.structural_tag.format");
  auto bad = Chat(R"("structured_outputs": {"structural_tag": "{not json"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(StatusParam(bad.status()), "structured_outputs.structural_tag");
  auto type = Chat(R"("structured_outputs": {"structural_tag": {"type": "tags",
      "structures": [{"begin": "<a>", "end": ""}], "triggers": ["<a"]}})");
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(StatusParam(type.status()), "structured_outputs.structural_tag.type");
  // A structural tag and another constraint: the second named.
  auto two = Chat(absl::StrCat(R"("response_format": )", kWeatherTag,
                               R"(, "guided_regex": "a")"));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(StatusParam(two.status()), "guided_regex");
}

TEST_F(StructuredOutputRequestTest, GbnfGrammarFieldsOnBothEndpoints) {
  const std::string gbnf = R"(root ::= item (\", \" item)*\nitem ::= [a-z]+ | \"(\" root \")\")";
  for (const std::string field : {"guided_grammar", "grammar"}) {
    for (bool chat : {true, false}) {
      const std::string extra = absl::StrCat("\"", field, "\": \"", gbnf, "\"");
      auto r = chat ? Chat(extra) : Completion(extra);
      ASSERT_TRUE(r.ok()) << extra << " " << r.status();
      EXPECT_TRUE(Accepts(*r, "ab, (c, (d)), e")) << field;
      EXPECT_FALSE(Accepts(*r, "ab, (c")) << field;
      EXPECT_FALSE(Accepts(*r, "AB")) << field;
    }
  }
  auto nested = Chat(R"("structured_outputs": {"grammar": "root ::= \"yes\" | \"no\""})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_TRUE(Accepts(*nested, "no"));
  EXPECT_FALSE(Accepts(*nested, "maybe"));
  // One compile for the three spellings of one grammar: the cache key is the text.
  const int64_t compiles = ctx_.structured_outputs->cache().compiles();
  ASSERT_TRUE(Completion(R"("grammar": "root ::= \"yes\" | \"no\"")").ok());
  ASSERT_TRUE(Completion(R"("guided_grammar": "root ::= \"yes\" | \"no\"")").ok());
  EXPECT_EQ(ctx_.structured_outputs->cache().compiles(), compiles);
}

TEST_F(StructuredOutputRequestTest, GbnfGrammarRefusals) {
  struct Case {
    std::string extra;
    std::string param;
    std::string says;  // a part of the message
  };
  const Case cases[] = {
      {R"("guided_grammar": 5)", "guided_grammar", "non-empty string: a GBNF grammar"},
      {R"("grammar": "")", "grammar", "non-empty string: a GBNF grammar"},
      {R"("grammar": "root ::= \"a\"\nroot ::= x")", "grammar",
       "grammar cannot be compiled: GBNF: rule 'root' is defined twice at line 2, column 1"},
      {R"("guided_grammar": "root ::= \"a\" undefined")", "guided_grammar",
       "rule 'undefined' is not defined at line 1, column 14"},
      {R"("structured_outputs": {"grammar": "root ::= [a-"})", "structured_outputs.grammar",
       "an unterminated character class '[' at line 1, column 10"},
      {R"("grammar": "start ::= \"a\"")", "grammar", "no 'root' rule"},
      {R"("grammar": "root ::= e\ne ::= e \"+\" | \"1\"")", "grammar",
       "grammar cannot be compiled: the grammar's rule 'e' is left-recursive"},
      {R"("grammar": "root ::= \"a\"", "guided_regex": "a")", "grammar",
       "grammar and guided_regex both constrain"},
      {R"("guided_grammar": "root ::= \"a\"", "grammar": "root ::= \"a\"")", "grammar",
       "grammar and guided_grammar both constrain"},
  };
  for (const Case& c : cases) {
    for (bool chat : {true, false}) {
      auto r = chat ? Chat(c.extra) : Completion(c.extra);
      ASSERT_FALSE(r.ok()) << c.extra;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.extra;
      EXPECT_EQ(StatusParam(r.status()), c.param) << c.extra << " " << r.status();
      EXPECT_NE(r.status().message().find(c.says), std::string::npos)
          << c.extra << " " << r.status();
    }
  }
}

TEST_F(StructuredOutputRequestTest, MultipleOfEmailAndPatternBesideFormat) {
  // What zod 4 sends for .email() / .uuid() / .int().multipleOf(): a pattern beside the format.
  auto r = Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "object", "properties": {
        "mail": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid", "pattern": "^[0-9a-f-]+$"},
        "n": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 20}},
      "required": ["mail", "id", "n"]}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string id = R"("123e4567-e89b-12d3-a456-426614174000")";
  EXPECT_TRUE(Accepts(*r, R"({"mail": "a.b@c.io", "id": )" + id + R"(, "n": 15})"));
  EXPECT_FALSE(Accepts(*r, R"({"mail": "a.b@c.io", "id": )" + id + R"(, "n": 12})"));
  EXPECT_FALSE(Accepts(*r, R"({"mail": "a.b@c.io", "id": )" + id + R"(, "n": 25})"));
  EXPECT_FALSE(Accepts(*r, R"({"mail": "a.b", "id": )" + id + R"(, "n": 5})"));
  EXPECT_FALSE(Accepts(*r, R"({"mail": "a@c.io", "id": "123E4567-E89B-12D3-A456-426614174000",
      "n": 5})"));
  auto disjoint = Completion(R"("guided_json": {"type": "string", "format": "date",
      "pattern": "^x"})");
  ASSERT_FALSE(disjoint.ok());
  EXPECT_EQ(StatusParam(disjoint.status()), "guided_json");
  EXPECT_NE(disjoint.status().message().find("'pattern' with 'format' at #"), std::string::npos)
      << disjoint.status();
}

TEST_F(StructuredOutputRequestTest, UnsupportedKeywordsNameKeywordAndPath) {
  auto r = Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "object", "properties": {"a": {"type": "integer",
      "multipleOf": 0.123456789}}}}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "response_format.json_schema.schema");
  EXPECT_NE(r.status().message().find("multipleOf"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("#/properties/a"), std::string::npos) << r.status();
  auto g = Completion(R"("guided_json": {"type": "object", "patternProperties": {}})");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(StatusParam(g.status()), "guided_json");
  EXPECT_NE(g.status().message().find("patternProperties"), std::string::npos) << g.status();
}

TEST_F(StructuredOutputRequestTest, TheCacheCompilesEachSchemaOnceAndStaysBounded) {
  text::grammar::ConstraintCache& cache = ctx_.structured_outputs->cache();
  const auto schema = [](int i) {
    return absl::StrCat(R"("guided_json": {"type": "object", "properties": {"k)", i,
                        R"(": {"type": "integer"}}})");
  };
  ASSERT_TRUE(Completion(schema(1)).ok());
  auto a = Completion(schema(1));
  auto b = Completion(schema(1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->inputs[0].constraint, b->inputs[0].constraint);
  EXPECT_EQ(cache.compiles(), 1);
  ASSERT_TRUE(Completion(schema(2)).ok());
  ASSERT_TRUE(Completion(schema(3)).ok());
  EXPECT_EQ(cache.compiles(), 3);
  EXPECT_EQ(cache.size(), 2u) << "two entries at most";
  ASSERT_TRUE(Completion(schema(1)).ok());  // evicted: compiled again
  EXPECT_EQ(cache.compiles(), 4);
}

TEST_F(StructuredOutputRequestTest, WithoutACompilerTheRequestIsRefused) {
  ctx_.structured_outputs = nullptr;
  auto r = Chat(R"("response_format": {"type": "json_object"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "response_format");
}

TEST(GrammarVocabularyTest, SpecialTokensHaveNoBytes) {
  auto t = text::Tokenizer::FromFile(BundledTokenizerPath());
  ASSERT_TRUE(t.ok()) << t.status();
  auto vocab = GrammarVocabulary(**t);
  ASSERT_EQ(vocab->size(), (*t)->vocab_size());
  for (int id : {(*t)->bos_id(), (*t)->eos_id(), (*t)->unk_id()}) {
    if (id >= 0) {
      EXPECT_TRUE(vocab->bytes(id).empty()) << id;
    }
  }
  const std::vector<int32_t> ids = (*t)->Encode("Once upon", /*add_bos=*/false);
  std::string joined;
  for (int32_t id : ids) joined += vocab->bytes(id);
  EXPECT_NE(joined.find("Once upon"), std::string::npos) << joined;
}

}  // namespace
}  // namespace banyan::server
