// Differential test: banyan's native tokenizer against libsentencepiece (the library, through
// SpmOracle) and the spm_encode / spm_decode tools, on randomized text with a fresh seed per run
// (printed on failure; BANYAN_TEST_SEED replays it).
//
// Models: the bundled BPE model; variants of it with unused and user-defined pieces and other
// normalizer flags; and, when spm_train is installed, unigram and BPE models trained here with
// the nmt_nfkc normalizer, user-defined symbols, byte fallback on and off.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer/incremental_detokenizer.h"
#include "text/tokenizer/spm_model_reader.h"
#include "text/tokenizer/spm_tokenizer.h"
#include "tests/text/tokenizer/random_text.h"
#include "tests/text/tokenizer/spm_model_writer.h"
#include "tests/text/tokenizer/spm_oracle.h"

namespace banyan::text {
namespace {

using ::banyan::text::testing::RandomText;
using ::banyan::text::testing::RandomTextOptions;
using ::banyan::text::testing::SerializeSpmModel;
using ::banyan::text::testing::SpmOracle;
using ::banyan::text::testing::TestSeed;

const std::string kBundledModel =
    std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/tok512.model";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// C-style escaping of non-printable bytes, for failure messages.
std::string Escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0x20 && b < 0x7F && c != '\\') {
      out.push_back(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", b);
      out += buf;
    }
  }
  return out;
}

template <typename T>
std::string Join(const std::vector<T>& v) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size(); ++i) out << (i ? " " : "") << v[i];
  return out.str();
}

// Totals over the whole run, printed at the end.
int64_t g_strings_compared = 0;
int64_t g_id_streams_compared = 0;

// Compares Encode, Decode and the incremental detokenizer with sentencepiece on `num_strings`
// random strings and as many random id streams.
void CompareWithOracle(const std::string& name, const std::string& model, int num_strings) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("model=" + name + " seed=" + std::to_string(seed));
  auto vocab = ParseSpmModel(model, name);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  RandomTextOptions options;
  for (size_t id = 0; id < vocab->pieces.size(); ++id) {
    if (vocab->types[id] == PieceType::kUserDefined)
      options.extra_words.push_back(vocab->pieces[id]);
  }
  auto ours = SpmTokenizer::FromVocab(*std::move(vocab));
  ASSERT_TRUE(ours.ok()) << ours.status();
  const SpmTokenizer& tok = **ours;
  std::string error;
  std::unique_ptr<SpmOracle> oracle = SpmOracle::LoadBytes(model, &error);
  ASSERT_NE(oracle, nullptr) << error;
  ASSERT_EQ(tok.vocab_size(), oracle->piece_size());
  ASSERT_EQ(tok.bos_id(), oracle->bos_id());
  ASSERT_EQ(tok.eos_id(), oracle->eos_id());
  ASSERT_EQ(tok.unk_id(), oracle->unk_id());

  std::cout << "[oracle] " << name << ": " << tok.vocab_size() << " pieces, "
            << (tok.vocab().model_type == SpmModelType::kBpe ? "BPE" : "unigram") << std::endl;

  std::mt19937_64 rng(seed);
  int failures = 0;
  for (int i = 0; i < num_strings && failures < 5; ++i) {
    std::string text = RandomText(rng, options);
    if (i % 200 == 0) {  // now and then a long text (thousands of characters)
      for (int k = 0; k < 200; ++k) text += RandomText(rng, options);
    }
    const bool add_bos = i % 2 == 1;
    bool ok = false;
    const std::vector<int> expected = oracle->Encode(text, add_bos, &ok);
    ASSERT_TRUE(ok) << "sentencepiece failed on \"" << Escape(text) << "\"";
    const std::vector<int32_t> actual = tok.Encode(text, add_bos);
    ++g_strings_compared;
    if (std::vector<int>(actual.begin(), actual.end()) != expected) {
      std::vector<std::string> ours_pieces;
      for (const int32_t id : actual) ours_pieces.emplace_back(tok.Piece(id));
      ADD_FAILURE() << "Encode(\"" << Escape(text) << "\")\n  ours:          " << Join(actual)
                    << "\n  sentencepiece: " << Join(expected)
                    << "\n  ours:          " << Escape(Join(ours_pieces))
                    << "\n  sentencepiece: " << Escape(Join(oracle->EncodePieces(text)));
      ++failures;
      continue;
    }
    const std::string expected_text = oracle->Decode(expected, &ok);
    ASSERT_TRUE(ok);
    if (tok.Decode(actual) != expected_text) {
      ADD_FAILURE() << "Decode(Encode(\"" << Escape(text) << "\")) = \""
                    << Escape(tok.Decode(actual)) << "\", sentencepiece: \""
                    << Escape(expected_text) << "\"";
      ++failures;
    }
  }

  // Random id streams, half of them mostly byte pieces so that characters are split and broken.
  std::vector<int> byte_ids;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    if (tok.vocab().types[id] == PieceType::kByte) byte_ids.push_back(id);
  }
  std::uniform_int_distribution<int> any_id(0, tok.vocab_size() - 1);
  for (int i = 0; i < num_strings && failures < 5; ++i) {
    std::vector<int> ids(std::uniform_int_distribution<int>(0, 24)(rng));
    const bool bytes = i % 2 == 0 && !byte_ids.empty();
    for (int& id : ids) {
      id = bytes && rng() % 5 != 0 ? byte_ids[rng() % byte_ids.size()] : any_id(rng);
    }
    bool ok = false;
    const std::string expected = oracle->Decode(ids, &ok);
    ASSERT_TRUE(ok);
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (const int32_t id : ids32) streamed += detok.Push(id);
    streamed += detok.Flush();
    ++g_id_streams_compared;
    if (tok.Decode(ids32) != expected || streamed != expected) {
      ADD_FAILURE() << "Decode(" << Join(ids) << ")\n  ours:          \""
                    << Escape(tok.Decode(ids32)) << "\"\n  streamed:      \"" << Escape(streamed)
                    << "\"\n  sentencepiece: \"" << Escape(expected) << "\"";
      ++failures;
    }
  }
}

TEST(OracleTest, ProcessHasNoSystemProtobufOrGrpc) {
  // libsentencepiece's bundled protobuf 3.14 aborts next to the system's 3.21 (NOTES.md).
  const std::string maps = ReadAll("/proc/self/maps");
  EXPECT_EQ(maps.find("libprotobuf.so"), std::string::npos);
  EXPECT_EQ(maps.find("libgrpc"), std::string::npos);
}

TEST(OracleTest, BundledBpeModel) {
  CompareWithOracle("tok512", ReadAll(kBundledModel), 20000);
  // FromFile reads the same model.
  auto from_file = Tokenizer::FromFile(kBundledModel);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ((*from_file)->Encode("Once upon a time", true).size(), 5u);
}

// Marks every k-th multi-character normal piece of `vocab` as `type`.
void Retype(SpmVocab* vocab, int k, int phase, PieceType type) {
  int seen = 0;
  for (size_t id = 0; id < vocab->pieces.size(); ++id) {
    if (vocab->types[id] != PieceType::kNormal || vocab->pieces[id].size() < 2) continue;
    if (seen++ % k == phase) vocab->types[id] = type;
  }
}

TEST(OracleTest, BpeWithUnusedAndUserDefinedPieces) {
  auto vocab = ReadSpmModelFile(kBundledModel);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  Retype(&*vocab, 7, 3, PieceType::kUnused);
  Retype(&*vocab, 29, 5, PieceType::kUserDefined);
  CompareWithOracle("tok512+unused+user_defined", SerializeSpmModel(*vocab), 5000);
}

TEST(OracleTest, BpeWithOtherNormalizerFlags) {
  auto vocab = ReadSpmModelFile(kBundledModel);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  for (int flags = 0; flags < 8; ++flags) {
    vocab->add_dummy_prefix = flags & 1;
    vocab->remove_extra_whitespaces = flags & 2;
    vocab->escape_whitespaces = flags & 4;
    CompareWithOracle("tok512 flags=" + std::to_string(flags), SerializeSpmModel(*vocab), 1500);
  }
}

// Trains small models with the spm_train tool into a temporary directory.
class TrainedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v spm_train > /dev/null 2>&1") != 0) return;
    std::string dir_template = ::testing::TempDir() + "/banyan_spm_XXXXXX";
    if (mkdtemp(dir_template.data()) == nullptr) return;
    dir_ = new std::string(dir_template);
    // A corpus with a Zipf-like mix of pseudo-words and real multilingual words, so training
    // finds enough pieces; fixed, so the models are the same every run.
    std::mt19937_64 rng(20261130);
    static const char* kSyllables[] = {
        "ka", "to", "ri", "men", "sa", "lo", "qu",   "ex", "th", "ing", "é", "ü",  "ñ", "日",
        "本", "語", "п",  "ри",  "ве", "т",  "🙂", "①",  "Ａ", "ﬁ",   "1", "42", "-", "'s"};
    std::vector<std::string> words;
    for (int w = 0; w < 800; ++w) {
      std::string word;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int s = 0; s < n; ++s) word += kSyllables[rng() % std::size(kSyllables)];
      words.push_back(word);
    }
    std::ofstream corpus(*dir_ + "/corpus.txt");
    for (int line = 0; line < 4000; ++line) {
      const int n = 1 + static_cast<int>(rng() % 15);
      for (int i = 0; i < n; ++i) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        corpus << (i ? (rng() % 10 == 0 ? "  " : " ") : "")
               << words[static_cast<size_t>(u * u * u * words.size())];
      }
      corpus << "\n";
    }
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::system(("rm -rf '" + *dir_ + "'").c_str());
    delete dir_;
    dir_ = nullptr;
  }

  // Returns the model's path, or "" after recording a failure.
  static std::string Train(const std::string& name, const std::string& flags) {
    const std::string prefix = *dir_ + "/" + name;
    const std::string cmd = "spm_train --input=" + *dir_ + "/corpus.txt --model_prefix=" + prefix +
                            " --num_threads=1 --hard_vocab_limit=false " + flags + " > " + prefix +
                            ".log 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << cmd << " failed:\n" << ReadAll(prefix + ".log");
      return "";
    }
    return prefix + ".model";
  }

  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "spm_train is not installed";
  }

  static std::string* dir_;
};
std::string* TrainedModelTest::dir_ = nullptr;

TEST_F(TrainedModelTest, UnigramNfkcWithUserDefinedSymbols) {
  const std::string path = Train("uni_nfkc",
                                 "--model_type=unigram --vocab_size=400 "
                                 "--user_defined_symbols='<sep>,foo,▁bar'");
  ASSERT_FALSE(path.empty());
  const std::string model = ReadAll(path);
  auto vocab = ParseSpmModel(model, path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->model_type, SpmModelType::kUnigram);
  EXPECT_FALSE(vocab->precompiled_charsmap.empty());  // nmt_nfkc
  CompareWithOracle("unigram nmt_nfkc", model, 10000);
  Retype(&*vocab, 5, 1, PieceType::kUnused);
  CompareWithOracle("unigram nmt_nfkc + unused", SerializeSpmModel(*vocab), 3000);
}

TEST_F(TrainedModelTest, UnigramIdentityWithByteFallback) {
  const std::string path =
      Train("uni_bytes",
            "--model_type=unigram --vocab_size=500 --byte_fallback=true "
            "--normalization_rule_name=identity --remove_extra_whitespaces=false");
  ASSERT_FALSE(path.empty());
  CompareWithOracle("unigram identity byte_fallback", ReadAll(path), 10000);
}

TEST_F(TrainedModelTest, BpeNfkcWithoutDummyPrefix) {
  const std::string path = Train("bpe_nfkc",
                                 "--model_type=bpe --vocab_size=300 "
                                 "--add_dummy_prefix=false --user_defined_symbols='<sep>'");
  ASSERT_FALSE(path.empty());
  CompareWithOracle("bpe nmt_nfkc no dummy prefix", ReadAll(path), 10000);
}

// Runs `tool` with `input` on stdin and returns its stdout.
std::string RunTool(const std::string& command, const std::string& input) {
  std::string in_path = ::testing::TempDir() + "/banyan_spm_in_XXXXXX";
  const int fd = mkstemp(in_path.data());
  if (fd < 0) return "";
  close(fd);
  std::ofstream(in_path, std::ios::binary) << input;
  std::string out;
  if (FILE* p = popen((command + " < " + in_path).c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    pclose(p);
  }
  std::remove(in_path.c_str());
  return out;
}

TEST(OracleTest, AgreesWithCommandLineTools) {
  if (std::system("command -v spm_encode > /dev/null 2>&1 && command -v spm_decode > /dev/null "
                  "2>&1") != 0) {
    GTEST_SKIP() << "spm_encode / spm_decode are not installed";
  }
  auto tok = Tokenizer::FromFile(kBundledModel);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  // The tools work line by line, so the lines hold no newline or carriage return.
  std::vector<std::string> lines = {"Hello world", "  Once upon a time,  there was a dog.  ",
                                    "naïve café 日本 🙂", "tabs\tand\x01controls"};
  while (lines.size() < 200) {
    std::string text = RandomText(rng, {.invalid_bytes = false, .extra_words = {}});
    std::erase_if(text, [](char c) { return c == '\n' || c == '\r'; });
    lines.push_back(text);
  }
  std::string input;
  for (const std::string& line : lines) input += line + "\n";
  std::istringstream encoded(
      RunTool("spm_encode --model=" + kBundledModel + " --output_format=id", input));
  std::string decode_input;
  std::vector<std::string> expected_decoded;
  std::string line;
  for (const std::string& text : lines) {
    ASSERT_TRUE(std::getline(encoded, line)) << "spm_encode gave too few lines";
    const std::vector<int32_t> ours = (*tok)->Encode(text, false);
    std::vector<std::string> ours_text;
    for (const int32_t id : ours) ours_text.push_back(std::to_string(id));
    EXPECT_EQ(Join(ours_text), line) << "seed=" << seed << " text=\"" << Escape(text) << "\"";
    decode_input += line + "\n";
    expected_decoded.push_back((*tok)->Decode(ours));
  }
  std::istringstream decoded(
      RunTool("spm_decode --model=" + kBundledModel + " --input_format=id", decode_input));
  for (const std::string& ours : expected_decoded) {
    ASSERT_TRUE(std::getline(decoded, line)) << "spm_decode gave too few lines";
    EXPECT_EQ(ours, line) << "seed=" << seed;
  }
  g_strings_compared += static_cast<int64_t>(lines.size());
}

class SummaryPrinter : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    std::cout << "[oracle] compared " << g_strings_compared << " random strings and "
              << g_id_streams_compared << " random id streams with sentencepiece" << std::endl;
  }
};
const bool kSummaryRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SummaryPrinter);
  return true;
}();

}  // namespace
}  // namespace banyan::text
