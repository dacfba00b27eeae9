// SampleText: stop strings across token boundaries, hold-back, never emitting the stop string.
#include "scheduler/sample_text.h"

#include <random>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/random.h"

namespace banyan::scheduler {
namespace {

class SampleTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = engine::Tokenizer::FromFile(std::string(BANYAN_SOURCE_DIR) +
                                       "/models/stories260K/tok512.model")
               ->release();
  }
  static void TearDownTestSuite() { delete tok_; }
  static engine::Tokenizer* tok_;
};
engine::Tokenizer* SampleTextTest::tok_ = nullptr;

// Streams `text` token by token; returns what was emitted and whether a stop matched.
std::pair<std::string, bool> Stream(const engine::Tokenizer& tok, const std::string& text,
                                    std::vector<std::string> stop) {
  SampleText st(tok, std::move(stop));
  std::string out;
  for (int32_t id : tok.Encode(text, false)) {
    bool stopped = false;
    out += st.Push(id, &stopped);
    if (stopped) return {out, true};
  }
  return {out + st.Finish(), false};
}

TEST_F(SampleTextTest, CutsBeforeStopStringSpanningTokens) {
  auto [out, stopped] = Stream(*tok_, "Once upon a time, there was a dog.", {"there was"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "Once upon a time, ");
}

TEST_F(SampleTextTest, NoStopEmitsEverything) {
  auto [out, stopped] = Stream(*tok_, "The cat sat. The end", {"dog", "xyz"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "The cat sat. The end");
}

TEST_F(SampleTextTest, EarliestOfSeveralStops) {
  auto [out, stopped] = Stream(*tok_, "a big red ball and a small cat", {"small", "red"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "a big ");
}

// Property: for random texts and random stop strings taken from them, the output is exactly the
// prefix before the first occurrence, and nothing is emitted before it is certain.
TEST_F(SampleTextTest, RandomStopsMatchFind) {
  BANYAN_SEEDED_RNG(rng);
  const std::vector<std::string> words = {"the", "cat", "dog", " ", ".", ",", "sun", "é", "日本",
                                          "\n", "a", "ball"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = 0; i < 30; ++i) text += words[rng() % words.size()] + (rng() % 2 ? " " : "");
    std::string decoded = tok_->Decode(tok_->Encode(text, false));
    size_t a = rng() % decoded.size(), len = 1 + rng() % 6;
    std::string stop = decoded.substr(a, len);
    // Avoid cutting a UTF-8 character: stops start and end on character boundaries.
    if ((static_cast<unsigned char>(stop[0]) & 0xC0) == 0x80) continue;
    size_t end = a + stop.size();
    if (end < decoded.size() && (static_cast<unsigned char>(decoded[end]) & 0xC0) == 0x80) {
      continue;
    }
    auto [out, stopped] = Stream(*tok_, text, {stop});
    EXPECT_TRUE(stopped) << text << " | " << stop;
    EXPECT_EQ(out, decoded.substr(0, decoded.find(stop))) << text << " | " << stop;
  }
}

}  // namespace
}  // namespace banyan::scheduler
