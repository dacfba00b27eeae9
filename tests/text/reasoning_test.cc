// ReasoningSplitter (text/reasoning.h): the parts of whole outputs, and the same parts from the
// output fed in pieces split at every boundary (markers cut anywhere) and at random boundaries.
#include "text/reasoning.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random.h"

namespace banyan::text {
namespace {

struct Case {
  std::string text;
  std::string reasoning;
  std::string content;
};

// vLLM's reading of each output (qwen3 / deepseek_r1 with thinking on).
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"<think>why</think>answer", "why", "answer"},
      {"<think>\nstep 1\n</think>\n\n{\"a\": 1}", "\nstep 1\n", "\n\n{\"a\": 1}"},
      // The template put <think> in the prompt: the output starts inside the thinking.
      {"step 1</think>answer", "step 1", "answer"},
      {"\n<think>x</think>y", "x", "y"},
      {"</think>only content", "", "only content"},
      {"<think></think>", "", ""},
      // Cut before </think>: all reasoning, no content.
      {"<think>still thinking", "still thinking", ""},
      {"still thinking", "still thinking", ""},
      {"<think>almost</thi", "almost</thi", ""},
      {"<thin", "<thin", ""},
      {"  ", "  ", ""},
      {"", "", ""},
      // Only the first </think> ends the thinking; a <think> inside it is its text.
      {"a</think>b</think>c", "a", "b</think>c"},
      {"<think>a<think>b</think>c", "a<think>b", "c"},
      {"<thinking>x</think>y", "<thinking>x", "y"},
      {"<<think>x</think>y", "<<think>x", "y"},
      {"x <think>y</think>z", "x <think>y", "z"},
      {"<think>a<</</th</think>b", "a<</</th", "b"},
      {"<think>déjà vu ✓</think>ответ", "déjà vu ✓", "ответ"},
  };
  return cases;
}

ReasoningParts FeedPieces(const std::vector<std::string>& pieces) {
  ReasoningSplitter s;
  ReasoningParts all;
  for (const std::string& p : pieces) {
    ReasoningParts got = s.Feed(p);
    all.reasoning += got.reasoning;
    all.content += got.content;
  }
  ReasoningParts rest = s.Finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  return all;
}

TEST(ReasoningTest, WholeOutputs) {
  for (const Case& c : Cases()) {
    ReasoningParts p = SplitReasoning(c.text);
    EXPECT_EQ(p.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(p.content, c.content) << c.text;
  }
}

TEST(ReasoningTest, EveryOneAndTwoCutSplitGivesTheSameParts) {
  for (const Case& c : Cases()) {
    const size_t n = c.text.size();
    for (size_t i = 0; i <= n; ++i) {
      for (size_t j = i; j <= n; ++j) {
        ReasoningParts p =
            FeedPieces({c.text.substr(0, i), c.text.substr(i, j - i), c.text.substr(j)});
        EXPECT_EQ(p.reasoning, c.reasoning) << c.text << " cut at " << i << ", " << j;
        EXPECT_EQ(p.content, c.content) << c.text << " cut at " << i << ", " << j;
      }
    }
  }
}

TEST(ReasoningTest, BytePiecesGiveTheSameParts) {
  for (const Case& c : Cases()) {
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    ReasoningParts p = FeedPieces(bytes);
    EXPECT_EQ(p.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(p.content, c.content) << c.text;
  }
}

// Random texts over an alphabet rich in marker bytes, split at random boundaries: the pieces'
// parts concatenate to the whole text's, and no piece carries a marker.
TEST(ReasoningTest, RandomTextsAndSplitsAgreeWithTheWholeText) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<std::string> atoms = {"<think>", "</think>", "<", "/", "think", ">", "t",
                                          "</", "<th", "ink>", " ", "\n", "a", "é"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int atoms_n = static_cast<int>(rng() % 12);
    for (int k = 0; k < atoms_n; ++k) text += atoms[rng() % atoms.size()];
    const ReasoningParts whole = SplitReasoning(text);
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = 1 + rng() % 5;
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    ReasoningSplitter s;
    ReasoningParts joined;
    for (const std::string& p : pieces) {
      ReasoningParts got = s.Feed(p);
      joined.reasoning += got.reasoning;
      joined.content += got.content;
    }
    ReasoningParts rest = s.Finish();
    joined.reasoning += rest.reasoning;
    joined.content += rest.content;
    ASSERT_EQ(joined.reasoning, whole.reasoning) << text;
    ASSERT_EQ(joined.content, whole.content) << text;
    // The parts and the markers make up the text again.
    const size_t end_at = text.find(kThinkEnd);
    if (end_at != std::string::npos) {
      EXPECT_EQ(text.substr(end_at + kThinkEnd.size()), whole.content) << text;
    }
  }
}

TEST(ReasoningTest, EndedOnceTheThinkingCloses) {
  ReasoningSplitter s;
  s.Feed("<think>a</thi");
  EXPECT_FALSE(s.ended());
  ReasoningParts p = s.Feed("nk>b");
  EXPECT_TRUE(s.ended());
  EXPECT_EQ(p.reasoning, "");  // "a" was given out with the first piece
  EXPECT_EQ(p.content, "b");
}

TEST(ReasoningTest, ParserNames) {
  EXPECT_EQ(ReasoningParserFromName("qwen3"), ReasoningParser::kQwen3);
  EXPECT_EQ(ReasoningParserFromName("deepseek_r1"), ReasoningParser::kDeepSeekR1);
  EXPECT_FALSE(ReasoningParserFromName("granite").has_value());
  EXPECT_FALSE(ReasoningParserFromName("").has_value());
}

TEST(ReasoningTest, PromptClosesThinking) {
  // Qwen 3 with enable_thinking false.
  EXPECT_TRUE(PromptClosesThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // Qwen 3 with thinking on (newer templates open it in the prompt), and older ones.
  EXPECT_FALSE(PromptClosesThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptClosesThinking("<|im_start|>assistant\n"));
  // An earlier turn's closed thinking does not close this one.
  EXPECT_FALSE(PromptClosesThinking("<think>a</think>b<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptClosesThinking("<think>a</think>b<|im_start|>assistant\n<think>\n"));
}

}  // namespace
}  // namespace banyan::text
