// Unit tests of the native SentencePiece tokenizer on the bundled stories260K model (BPE with
// byte fallback, identity normalizer) and on small hand-built models. The differential
// comparison with libsentencepiece lives in tokenizer_oracle_test.cc.
#include "text/tokenizer/spm_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "text/tokenizer/incremental_detokenizer.h"
#include "text/tokenizer/spm_model_reader.h"
#include "tests/text/tokenizer/random_text.h"
#include "tests/text/tokenizer/spm_model_writer.h"
#include "tests/text/tokenizer/pieces.h"

namespace banyan::text {
namespace {

using ::banyan::text::testing::IsValidUtf8;
using ::banyan::text::testing::RandomText;
using ::banyan::text::testing::SerializeSpmModel;
using ::banyan::text::testing::TestSeed;

const std::string kModelPath = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/tok512.model";
constexpr std::string_view kFffd = "\xEF\xBF\xBD";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/banyan_tok_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

class BundledModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = SpmTokenizer::FromFile(kModelPath);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static int Id(std::string_view piece) {
    for (int id = 0; id < tokenizer_->vocab_size(); ++id) {
      if (tokenizer_->Piece(id) == piece) return id;
    }
    ADD_FAILURE() << "no piece " << piece;
    return -1;
  }
  std::string Decode(const std::vector<int32_t>& ids) { return tokenizer_->Decode(ids); }

  static const SpmTokenizer* tokenizer_;
};
const SpmTokenizer* BundledModelTest::tokenizer_ = nullptr;

TEST_F(BundledModelTest, ReadsSpecialIdsAndSpecs) {
  EXPECT_EQ(tokenizer_->vocab_size(), 512);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_EQ(tokenizer_->unk_id(), 0);
  EXPECT_EQ(tokenizer_->Piece(0), "<unk>");
  EXPECT_EQ(tokenizer_->Piece(1), "<s>");
  EXPECT_EQ(tokenizer_->Piece(3), "<0x00>");
  EXPECT_EQ(tokenizer_->Piece(-1), "");
  EXPECT_EQ(tokenizer_->Piece(512), "");
  const SpmVocab& v = tokenizer_->vocab();
  EXPECT_EQ(v.model_type, SpmModelType::kBpe);
  EXPECT_TRUE(v.byte_fallback);
  EXPECT_EQ(v.pad_id, -1);
  EXPECT_TRUE(v.add_dummy_prefix);
  EXPECT_TRUE(v.remove_extra_whitespaces);
  EXPECT_TRUE(v.precompiled_charsmap.empty());  // normalizer "identity"
  EXPECT_EQ(v.types[1], PieceType::kControl);
  EXPECT_EQ(v.types[3], PieceType::kByte);
}

// Expected ids from `spm_encode --model=tok512.model --output_format=id` (sentencepiece
// 0.1.97). tokenizer_oracle_test compares many more strings against the library and the tool.
TEST_F(BundledModelTest, KnownEncodings) {
  EXPECT_EQ(tokenizer_->Encode("Hello world", false),
            (std::vector<int32_t>{346, 306, 414, 263, 304, 341}));
  EXPECT_EQ(
      tokenizer_->Encode("Once upon a time, there was a little girl.", false),
      (std::vector<int32_t>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 426}));
  EXPECT_EQ(tokenizer_->Encode("  leading  spaces  ", false),
            (std::vector<int32_t>{278, 411, 380, 299, 262, 427, 412, 331, 419}));
  EXPECT_EQ(tokenizer_->Encode("naïve café 日本 🙂", true),
            (std::vector<int32_t>{1,   297, 412, 198, 178, 360, 280, 412, 431, 485, 410,
                                  233, 154, 168, 233, 159, 175, 410, 243, 162, 156, 133}));
}

TEST_F(BundledModelTest, EmptyAndBlankText) {
  EXPECT_TRUE(tokenizer_->Encode("", false).empty());
  EXPECT_EQ(tokenizer_->Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(tokenizer_->Encode("     ", false).empty());
  EXPECT_EQ(Decode({}), "");
}

// What Decode(Encode(text)) must give for this model: invalid bytes become U+FFFD, runs of
// spaces collapse and leading/trailing spaces go (remove_extra_whitespaces); the rest survives
// because byte fallback covers every character.
std::string ExpectedRoundTrip(std::string_view text) {
  std::string fixed;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (n <= 4 && i + n <= text.size() && !IsValidUtf8(text.substr(i, n))) ++n;
    if (n > 4 || i + n > text.size()) {
      fixed += kFffd;
      ++i;
    } else {
      fixed += text.substr(i, n);
      i += n;
    }
  }
  std::string out;
  for (const char c : fixed) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

TEST_F(BundledModelTest, RoundTripsRandomText) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 3000; ++i) {
    // A literal "▁" in the input decodes as a space, so it cannot round-trip: drop it.
    const std::string raw = RandomText(rng);
    std::string text;
    for (size_t p = 0; p < raw.size();) {
      if (raw.compare(p, 3, "\xE2\x96\x81") == 0) {
        p += 3;
      } else {
        text.push_back(raw[p++]);
      }
    }
    const std::vector<int32_t> ids = tokenizer_->Encode(text, i % 2 == 0);
    ASSERT_EQ(Decode(ids), ExpectedRoundTrip(text)) << "seed=" << seed << " text=" << text;
  }
}

TEST_F(BundledModelTest, DecodeDropsOnlyTheDummyPrefixAndControlPieces) {
  const int he = Id("\xE2\x96\x81He");
  const int space = Id("\xE2\x96\x81");
  EXPECT_EQ(Decode({he, he}), "He He");
  EXPECT_EQ(Decode({1, he, 2}), "He");
  EXPECT_EQ(Decode({1, 2, 1}), "");
  // As sentencepiece 0.1.97: while the output is empty, every piece loses one leading "▁".
  EXPECT_EQ(Decode({space, he}), "He");
  EXPECT_EQ(Decode({Id("<0x41>"), he}), "A He");
  EXPECT_EQ(Decode({0, he}), tokenizer_->vocab().unk_surface + " He");
  EXPECT_EQ(Decode({-5, he, 100000}), "He");  // out-of-range ids are skipped
}

TEST_F(BundledModelTest, DecodeReassemblesBytePieces) {
  const int e6 = Id("<0xE6>"), x97 = Id("<0x97>"), xa5 = Id("<0xA5>");
  EXPECT_EQ(Decode({e6, x97, xa5}), "日");
  // An incomplete sequence ends at a non-byte piece: one U+FFFD per byte.
  EXPECT_EQ(Decode({e6, x97, Id("\xE2\x96\x81He")}),
            std::string(kFffd) + std::string(kFffd) + " He");
  // A byte that cannot continue the sequence: U+FFFD for the lead byte, then the byte itself.
  EXPECT_EQ(Decode({e6, Id("<0x41>"), x97}), std::string(kFffd) + "A" + std::string(kFffd));
}

// Returns the concatenation of Push outputs and Flush, checking every chunk is valid UTF-8.
std::string StreamDecode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detok(t);
  std::string out;
  for (const int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "chunk after id " << id;
    out += chunk;
  }
  const std::string tail = detok.Flush();
  EXPECT_TRUE(IsValidUtf8(tail));
  return out + tail;
}

TEST_F(BundledModelTest, IncrementalMatchesDecodeOnRandomIdStreams) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> any_id(-2, tokenizer_->vocab_size() + 1);
  std::uniform_int_distribution<int> byte_id(3, 3 + 255);
  for (int i = 0; i < 3000; ++i) {
    std::vector<int32_t> ids(std::uniform_int_distribution<int>(0, 30)(rng));
    const bool mostly_bytes = i % 2 == 0;
    for (int32_t& id : ids) id = mostly_bytes && rng() % 4 != 0 ? byte_id(rng) : any_id(rng);
    ASSERT_EQ(StreamDecode(*tokenizer_, ids), Decode(ids)) << "seed=" << seed << " case " << i;
  }
}

TEST_F(BundledModelTest, IncrementalEmitsEachCharacterAsSoonAsItIsComplete) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 500; ++i) {
    const std::vector<int32_t> ids = tokenizer_->Encode(
        RandomText(rng, {.invalid_bytes = false, .extra_words = {}}), i % 3 == 0);
    IncrementalDetokenizer detok(*tokenizer_);
    std::string streamed;
    for (size_t n = 1; n <= ids.size(); ++n) {
      streamed += detok.Push(ids[n - 1]);
      const std::string whole = Decode(std::vector<int32_t>(ids.begin(), ids.begin() + n));
      // Where the prefix ends between characters, Decode has no U+FFFD from cut sequences
      // (the text had no invalid bytes), and the stream must have caught up exactly.
      if (whole.find(kFffd) == std::string::npos) {
        ASSERT_EQ(streamed, whole) << "seed=" << seed << " case " << i << " after " << n;
      } else {
        ASSERT_EQ(whole.compare(0, streamed.size(), streamed), 0) << "seed=" << seed;
      }
    }
    ASSERT_EQ(streamed + detok.Flush(), Decode(ids)) << "seed=" << seed;
  }
}

TEST_F(BundledModelTest, IncrementalHoldsPartialCharacters) {
  IncrementalDetokenizer detok(*tokenizer_);
  EXPECT_EQ(detok.Push(1), "");
  EXPECT_EQ(detok.Push(Id("<0xE6>")), "");
  EXPECT_EQ(detok.Push(Id("<0x97>")), "");
  EXPECT_EQ(detok.Push(Id("<0xA5>")), "日");
  EXPECT_EQ(detok.Push(Id("\xE2\x96\x81He")), " He");  // not at the start any more
  EXPECT_EQ(detok.Push(Id("<0xF0>")), "");
  EXPECT_EQ(detok.Push(Id("<0x41>")), std::string(kFffd) + "A");  // 0x41 cannot continue
  EXPECT_EQ(detok.Push(Id("<0xE6>")), "");
  EXPECT_EQ(detok.Flush(), kFffd);
  EXPECT_EQ(detok.Flush(), "");

  IncrementalDetokenizer first(*tokenizer_);
  EXPECT_EQ(first.Push(Id("\xE2\x96\x81He")), "He");  // the dummy prefix goes
}

TEST(SpmModelReaderTest, MissingFile) {
  const std::string path = ::testing::TempDir() + "/banyan_tok_does_not_exist.model";
  auto t = Tokenizer::FromFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find(path), std::string_view::npos) << t.status();
}

void ExpectRejected(const std::string& name, const std::string& bytes) {
  const std::string path = WriteTemp(name, bytes);
  auto t = Tokenizer::FromFile(path);
  ASSERT_FALSE(t.ok()) << name;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find(path), std::string_view::npos) << t.status();
  std::remove(path.c_str());
}

TEST(SpmModelReaderTest, DirectoryIsRejected) {
  const std::string dir = std::string(BANYAN_SOURCE_DIR) + "/models";
  auto t = Tokenizer::FromFile(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(dir), std::string_view::npos) << t.status();
}

TEST(SpmModelReaderTest, RejectsEmptyTruncatedAndForeignFiles) {
  const std::string model = ReadAll(kModelPath);
  ASSERT_GT(model.size(), 1000u);
  ExpectRejected("empty.model", "");
  ExpectRejected("half.model", model.substr(0, model.size() / 2));
  ExpectRejected("short.model", model.substr(0, model.size() - 1));
  ExpectRejected("text.model", "This is a text file, not a SentencePiece model.\n");
  const std::string dir = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/";
  ExpectRejected("llama2c_tokenizer.model", ReadAll(dir + "tok512.bin"));
  ExpectRejected("gguf.model", ReadAll(dir + "stories260K.gguf"));
  ExpectRejected("readme.model", ReadAll(dir + "README.md"));
}

TEST(SpmModelReaderTest, EveryProperPrefixOfAModelIsRejected) {
  const std::string model = ReadAll(kModelPath);
  ASSERT_TRUE(ParseSpmModel(model, "tok512").ok());
  for (size_t n = 0; n < model.size(); ++n) {
    auto v = ParseSpmModel(std::string_view(model).substr(0, n), "tok512");
    ASSERT_FALSE(v.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_NE(v.status().message().find("tok512"), std::string_view::npos);
  }
}

TEST(SpmModelReaderTest, RandomBytesAreRejected) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(std::uniform_int_distribution<int>(0, 300)(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_FALSE(ParseSpmModel(bytes, "random").ok()) << "seed=" << seed;
  }
}

TEST(SpmModelReaderTest, WriterRoundTrip) {
  auto v = ReadSpmModelFile(kModelPath);
  ASSERT_TRUE(v.ok()) << v.status();
  v->pad_id = -1;
  v->add_dummy_prefix = false;
  v->unk_surface = "?";
  auto again = ParseSpmModel(SerializeSpmModel(*v), "written");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->pieces, v->pieces);
  EXPECT_EQ(again->scores, v->scores);
  EXPECT_EQ(again->types, v->types);
  EXPECT_EQ(again->pad_id, -1);
  EXPECT_FALSE(again->add_dummy_prefix);
  EXPECT_EQ(again->unk_surface, "?");
}

// A small vocabulary: <unk> <s> </s> ▁ a b, then `extra` pieces (score, type).
SpmVocab TinyVocab(SpmModelType type,
                   const std::vector<std::tuple<std::string, float, PieceType>>& extra) {
  SpmVocab v;
  v.model_type = type;
  v.pieces = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"};
  v.scores = {0, 0, 0, -5, -5, -5};
  v.types = {PieceType::kUnknown, PieceType::kControl, PieceType::kControl,
             PieceType::kNormal,  PieceType::kNormal,  PieceType::kNormal};
  for (const auto& [piece, score, piece_type] : extra) {
    v.pieces.push_back(piece);
    v.scores.push_back(score);
    v.types.push_back(piece_type);
  }
  return v;
}

TEST(TinyModelTest, BpeMergesHighestScoreThenLeftmost) {
  using P = PieceType;
  auto t = Tokenizer::FromVocab(
      TinyVocab(SpmModelType::kBpe,
                {{"ab", -1, P::kNormal}, {"ba", -1, P::kNormal}, {"bb", -0.5, P::kNormal}}));
  ASSERT_TRUE(t.ok()) << t.status();
  // "▁aba": ab and ba tie, the left one merges.
  EXPECT_EQ(Pieces(**t, "aba"), (std::vector<std::string>{"\xE2\x96\x81", "ab", "a"}));
  // "▁abb": bb scores higher than ab.
  EXPECT_EQ(Pieces(**t, "abb"), (std::vector<std::string>{"\xE2\x96\x81", "a", "bb"}));
  EXPECT_EQ(Pieces(**t, "a c"),
            (std::vector<std::string>{"\xE2\x96\x81", "a", "\xE2\x96\x81", "<unk>"}));
}

TEST(TinyModelTest, BpeUndoesMergesIntoUnusedPieces) {
  using P = PieceType;
  auto t = Tokenizer::FromVocab(
      TinyVocab(SpmModelType::kBpe, {{"ab", -1, P::kUnused}, {"aba", -0.5, P::kNormal}}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Pieces(**t, "aba"), (std::vector<std::string>{"\xE2\x96\x81", "aba"}));
  EXPECT_EQ(Pieces(**t, "abb"), (std::vector<std::string>{"\xE2\x96\x81", "a", "b", "b"}));
}

TEST(TinyModelTest, UserDefinedPiecesStayWhole) {
  using P = PieceType;
  auto plain = Tokenizer::FromVocab(TinyVocab(SpmModelType::kBpe, {{"ab", -1, P::kNormal}}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Pieces(**plain, "abab"), (std::vector<std::string>{"\xE2\x96\x81", "ab", "ab"}));
  // The user-defined "ba" is cut out first and never merges with its neighbours.
  auto t = Tokenizer::FromVocab(
      TinyVocab(SpmModelType::kBpe, {{"ab", -1, P::kNormal}, {"ba", 0, P::kUserDefined}}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Pieces(**t, "abab"), (std::vector<std::string>{"\xE2\x96\x81", "a", "ba", "b"}));
}

TEST(TinyModelTest, UnigramPicksTheBestTotalScore) {
  using P = PieceType;
  auto t = Tokenizer::FromVocab(TinyVocab(SpmModelType::kUnigram, {{"\xE2\x96\x81"
                                                                    "a",
                                                                    -1, P::kNormal},
                                                                   {"\xE2\x96\x81"
                                                                    "ab",
                                                                    -12, P::kNormal},
                                                                   {"ab", -3, P::kNormal}}));
  ASSERT_TRUE(t.ok()) << t.status();
  // ▁a + b = -6 beats ▁ab = -12 and ▁ + ab = -8.
  EXPECT_EQ(Pieces(**t, "ab"), (std::vector<std::string>{"\xE2\x96\x81"
                                                         "a",
                                                         "b"}));
  // An unknown character costs (lowest normal score - 10) and maps to <unk>.
  EXPECT_EQ(Pieces(**t, "a\xC3\xA9"), (std::vector<std::string>{"\xE2\x96\x81"
                                                                "a",
                                                                "<unk>"}));
}

TEST(TinyModelTest, FromVocabRejectsBrokenVocabularies) {
  SpmVocab dup = TinyVocab(SpmModelType::kBpe, {{"a", -1, PieceType::kNormal}});
  EXPECT_FALSE(Tokenizer::FromVocab(dup).ok());
  SpmVocab no_unk = TinyVocab(SpmModelType::kBpe, {});
  no_unk.types[0] = PieceType::kControl;
  EXPECT_FALSE(Tokenizer::FromVocab(no_unk).ok());
  SpmVocab no_bytes = TinyVocab(SpmModelType::kBpe, {});
  no_bytes.byte_fallback = true;
  EXPECT_FALSE(Tokenizer::FromVocab(no_bytes).ok());
  SpmVocab bad_bos = TinyVocab(SpmModelType::kBpe, {});
  bad_bos.bos_id = 99;
  EXPECT_FALSE(Tokenizer::FromVocab(bad_bos).ok());
  SpmVocab ragged = TinyVocab(SpmModelType::kBpe, {});
  ragged.scores.pop_back();
  EXPECT_FALSE(Tokenizer::FromVocab(ragged).ok());
  SpmVocab bad_byte = TinyVocab(SpmModelType::kBpe, {{"<0xzz>", 0, PieceType::kByte}});
  EXPECT_FALSE(Tokenizer::FromVocab(bad_byte).ok());
  SpmVocab bad_charsmap = TinyVocab(SpmModelType::kBpe, {});
  bad_charsmap.precompiled_charsmap = "\xFF\xFF\x00\x00garbage";
  EXPECT_FALSE(Tokenizer::FromVocab(bad_charsmap).ok());
}

}  // namespace
}  // namespace banyan::text
