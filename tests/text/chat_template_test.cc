// text/chat_template.h: the built-in templates (against their documented formats and Meta's
// reference for Llama 2), the names --chat-template takes, and how rendered text is encoded.
#include "text/chat_template.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/bundled_model.h"
#include "text/tokenizer/tokenizer.h"

namespace banyan::text {
namespace {

const std::string& TokenizerPath() {
  static const std::string path = testing::BundledModelDir() + "/tok512.model";
  return path;
}

TEST(ChatTemplateNameTest, EveryBuiltinNameRoundTripsAndOtherTextIsAFile) {
  for (ChatTemplate t : {ChatTemplate::kModel, ChatTemplate::kPlain, ChatTemplate::kLlama2,
                         ChatTemplate::kChatML}) {
    std::optional<ChatTemplate> back = ChatTemplateFromName(ChatTemplateName(t));
    ASSERT_TRUE(back.has_value()) << ChatTemplateName(t);
    EXPECT_EQ(*back, t);
  }
  for (const char* other : {"", "Plain", "chatml ", "llama3", "template.jinja", "./plain"}) {
    EXPECT_FALSE(ChatTemplateFromName(other).has_value()) << other;
  }
}

TEST(ChatTemplateTest, Plain) {
  auto s = RenderChat(
      ChatTemplate::kPlain,
      {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Story?"}});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 1u);
  EXPECT_TRUE((*s)[0].bos);
  EXPECT_EQ((*s)[0].text,
            "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Story?\nassistant:");
}

TEST(ChatTemplateTest, ChatML) {
  auto s = RenderChat(ChatTemplate::kChatML, {{"system", "S"}, {"user", "U"}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama2MatchesMetaReference) {
  auto s = RenderChat(
      ChatTemplate::kLlama2,
      {{"system", "SYS"}, {"user", " u1 "}, {"assistant", " a1\n"}, {"user", " u2 "}});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  // Meta strips the merged system + user text, so the user's leading space survives.
  EXPECT_EQ((*s)[0].text, "[INST] <<SYS>>\nSYS\n<</SYS>>\n\n u1 [/INST] a1 ");
  EXPECT_TRUE((*s)[0].bos);
  EXPECT_TRUE((*s)[0].eos);
  EXPECT_EQ((*s)[1].text, "[INST] u2 [/INST]");
  EXPECT_TRUE((*s)[1].bos);
  EXPECT_FALSE((*s)[1].eos);

  EXPECT_FALSE(RenderChat(ChatTemplate::kLlama2, {{"user", "a"}, {"user", "b"}}).ok());
  EXPECT_FALSE(RenderChat(ChatTemplate::kLlama2, {{"user", "a"}, {"assistant", "b"}}).ok());
  EXPECT_FALSE(RenderChat(ChatTemplate::kPlain, {}).ok());
}

TEST(ChatTemplateTest, EncodeAddsSpecialTokensAsIds) {
  auto t = Tokenizer::FromFile(TokenizerPath());
  ASSERT_TRUE(t.ok());
  std::vector<ChatSegment> segs = {{true, "[INST] a [/INST] b ", true},
                                         {true, "[INST] c [/INST]", false}};
  std::vector<int32_t> ids = EncodeChat(segs, **t);
  std::vector<int32_t> want = (*t)->Encode("[INST] a [/INST] b ", true);
  want.push_back((*t)->eos_id());
  std::vector<int32_t> second = (*t)->Encode("[INST] c [/INST]", true);
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(ids, want);
}

TEST(ChatTemplateTest, RenderedTextKeepsSpecialTokenTextsAsIds) {
  auto t = Tokenizer::FromFile(TokenizerPath());
  ASSERT_TRUE(t.ok());
  auto chat = MakeJinjaChat("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", "test",
                                  "<s>", "</s>", **t);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const Tokenizer& tok = **t;
  std::vector<int32_t> want = {tok.bos_id()};
  for (int32_t id : tok.Encode("a", false)) want.push_back(id);
  want.push_back(tok.eos_id());
  for (int32_t id : tok.Encode("b", false)) want.push_back(id);
  EXPECT_EQ(EncodeRendered(**chat, "<s>a</s>b", tok), want);
  EXPECT_EQ(EncodeRendered(**chat, "", tok), std::vector<int32_t>{});
  auto bad = MakeJinjaChat("{% if %}", "f.jinja", "", "", tok);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "chat template f.jinja: line 1: expected an expression, got '%}'");
}

}  // namespace
}  // namespace banyan::text
