// SampleText: stop strings across token boundaries, hold-back, never emitting the stop string.
#include "text/sample_text.h"

#include <random>

#include "text/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/random.h"

namespace banyan::text {
namespace {

class SampleTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = text::Tokenizer::FromFile(std::string(BANYAN_SOURCE_DIR) +
                                       "/models/stories260K/tok512.model")
               ->release();
  }
  static void TearDownTestSuite() { delete tok_; }
  static text::Tokenizer* tok_;
};
text::Tokenizer* SampleTextTest::tok_ = nullptr;

// Streams `text` token by token; returns what was emitted and whether a stop matched.
std::pair<std::string, bool> Stream(const text::Tokenizer& tok, const std::string& text,
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

// min_tokens: pushes with match_stops false never stop, and emit a stop string they contain; a
// match that ends in a later, matched push counts (also when it began in an unmatched one).
TEST_F(SampleTextTest, UnmatchedPushesDoNotStop) {
  const std::vector<int32_t> ids = tok_->Encode("the cat. the cat. the dog", false);
  const std::string full = tok_->Decode(ids);
  for (size_t min_tokens = 0; min_tokens <= ids.size(); ++min_tokens) {
    SampleText st(*tok_, {"cat"});
    std::string out;
    bool stopped = false;
    size_t i = 0;
    for (; i < ids.size() && !stopped; ++i) out += st.Push(ids[i], &stopped, i + 1 >= min_tokens);
    if (!stopped) out += st.Finish();
    // Where the text decoded through token k ends.
    const auto text_to = [&](size_t k) {
      return tok_->Decode(std::vector<int32_t>(ids.begin(), ids.begin() + k));
    };
    // The first "cat" that ends at or after the text of token min_tokens - 1 ends the sample.
    const size_t from = min_tokens == 0 ? 0 : text_to(min_tokens - 1).size();
    size_t want_cut = std::string::npos;
    for (size_t pos = full.find("cat"); pos != std::string::npos; pos = full.find("cat", pos + 1)) {
      if (pos + 3 > from) {
        want_cut = pos;
        break;
      }
    }
    EXPECT_EQ(stopped, want_cut != std::string::npos) << min_tokens;
    EXPECT_EQ(out, full.substr(0, want_cut)) << min_tokens;
  }
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
}  // namespace banyan::text
