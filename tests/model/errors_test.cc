// Bad model files: every failure is a Status whose message names the file and the problem.
#include <functional>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "model/dummy_weights.h"
#include "model/gguf_loader.h"
#include "model/llama2c_loader.h"
#include "model/model_io.h"
#include "model/safetensors_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ModelFile;
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// ---- llama2.c ----

TEST(Llama2cErrors, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir.File("short.bin");
  WriteBytes(path, ReadBytes(ModelFile("stories260K.bin")).substr(0, 10));
  const absl::Status s = LoadLlama2c(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("header")));
}

TEST(Llama2cErrors, TruncatedBody) {
  TempDir dir;
  const std::string path = dir.File("cut.bin");
  WriteBytes(path, ReadBytes(ModelFile("stories260K.bin")).substr(0, 500000));
  const absl::Status s = LoadLlama2c(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("truncated"),
                                HasSubstr("expected 1056540 bytes"), HasSubstr("has 500000")));
}

TEST(Llama2cErrors, TrailingBytes) {
  TempDir dir;
  const std::string path = dir.File("long.bin");
  WriteBytes(path, ReadBytes(ModelFile("stories260K.bin")) + "junk");
  const absl::Status s = LoadLlama2c(path).status();
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("trailing bytes"),
                                HasSubstr("expected 1056540"), HasSubstr("has 1056544")));
}

TEST(Llama2cErrors, HeaderInconsistentWithSize) {
  TempDir dir;
  const std::string path = dir.File("hdr.bin");
  std::string bytes = ReadBytes(ModelFile("stories260K.bin"));
  const int32_t layers = 6;
  std::memcpy(&bytes[8], &layers, 4);
  WriteBytes(path, bytes);
  EXPECT_THAT(Message(LoadLlama2c(path).status()),
              AllOf(HasSubstr(path), HasSubstr("n_layers=6"), HasSubstr("size mismatch")));
}

TEST(Llama2cErrors, InvalidHeaderValues) {
  TempDir dir;
  const std::string path = dir.File("bad.bin");
  std::string bytes = ReadBytes(ModelFile("stories260K.bin"));
  const int32_t heads = 7;  // 64 % 7 != 0
  std::memcpy(&bytes[12], &heads, 4);
  WriteBytes(path, bytes);
  const absl::Status s = LoadLlama2c(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("not divisible by n_heads 7")));
  const int32_t huge = 1 << 30;
  std::memcpy(&bytes[0], &huge, 4);
  WriteBytes(path, bytes);
  EXPECT_THAT(Message(LoadLlama2c(path).status()), AllOf(HasSubstr(path), HasSubstr("dim")));
}

// ---- GGUF ----

TEST(GgufErrors, WrongMagic) {
  TempDir dir;
  const std::string path = dir.File("bad.gguf");
  std::string bytes = ReadBytes(ModelFile("stories260K.gguf"));
  bytes[3] = 'X';
  WriteBytes(path, bytes);
  const absl::Status s = LoadGguf(path, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("bad magic")));
  // LoadModel on a .gguf with a bad magic reports the same.
  EXPECT_THAT(Message(LoadModel(path).status()), HasSubstr("bad magic"));
}

TEST(GgufErrors, UnsupportedVersion) {
  TempDir dir;
  const std::string path = dir.File("v9.gguf");
  std::string bytes = ReadBytes(ModelFile("stories260K.gguf"));
  bytes[4] = 9;
  WriteBytes(path, bytes);
  EXPECT_THAT(Message(LoadGguf(path, nullptr).status()),
              AllOf(HasSubstr(path), HasSubstr("version 9")));
}

TEST(GgufErrors, TruncatedMidTensor) {
  TempDir dir;
  const std::string path = dir.File("cut.gguf");
  const std::string bytes = ReadBytes(ModelFile("stories260K.gguf"));
  WriteBytes(path, bytes.substr(0, bytes.size() - 100));  // inside the last tensor
  const absl::Status s = LoadGguf(path, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(s),
              AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("blk.4.ffn_norm.weight")));
}

TEST(GgufErrors, TruncatedInMetadata) {
  TempDir dir;
  const std::string path = dir.File("cut.gguf");
  WriteBytes(path, ReadBytes(ModelFile("stories260K.gguf")).substr(0, 3000));
  const absl::Status s = LoadGguf(path, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("truncated")));
}

ModelWeights TinyDummy() {
  absl::StatusOr<ModelConfig> c = NamedShapeConfig("tiny-d64-gqa4");
  return MakeDummyWeights(*c, 1);
}

TEST(GgufErrors, UnsupportedTensorType) {
  TempDir dir;
  const std::string path = dir.File("q2k.gguf");
  WriteBytes(path, testing::GgufFromWeights(TinyDummy(), testing::kGgmlF32, "blk.1.ffn_up.weight",
                                            /*Q2_K*/ 10));
  const absl::Status s = LoadGguf(path, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("unsupported tensor type"),
                                HasSubstr("Q2_K"), HasSubstr("blk.1.ffn_up.weight")));
}

TEST(GgufErrors, ShapeMismatch) {
  // Metadata says 8 kv heads, the tensors have 2: attn_k is [16, 64], expected [64, 64].
  ModelWeights w = TinyDummy();
  std::string bytes = testing::GgufFromWeights(w, testing::kGgmlF32);
  TempDir dir;
  const std::string key = "llama.attention.head_count_kv";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  const uint32_t kv = 8;
  std::memcpy(&bytes[at + key.size() + 4], &kv, 4);  // skip the value type
  const std::string path = dir.File("shape.gguf");
  WriteBytes(path, bytes);
  const absl::Status s = LoadGguf(path, nullptr).status();
  EXPECT_THAT(Message(s), AllOf(HasSubstr(path), HasSubstr("tensor shape mismatch"),
                                HasSubstr("blk.0.attn_k.weight"), HasSubstr("expected [64, 64]"),
                                HasSubstr("got [16, 64]")));
}

TEST(GgufErrors, MissingTensorAndWrongArchitecture) {
  TempDir dir;
  std::string bytes = testing::GgufFromWeights(TinyDummy(), testing::kGgmlF32);
  std::string missing = bytes;
  const size_t at = missing.find("blk.1.attn_v.weight");
  ASSERT_NE(at, std::string::npos);
  missing[at + 6] = 'X';  // blk.1.aXtn_v.weight
  WriteBytes(dir.File("missing.gguf"), missing);
  EXPECT_THAT(Message(LoadGguf(dir.File("missing.gguf"), nullptr).status()),
              AllOf(HasSubstr("missing.gguf"), HasSubstr("missing tensor blk.1.attn_v.weight")));

  std::string arch = bytes;
  const size_t a = arch.find("llama");  // the value of general.architecture comes first
  arch.replace(a, 5, "gemma");
  WriteBytes(dir.File("arch.gguf"), arch);
  const absl::Status s = LoadGguf(dir.File("arch.gguf"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("arch.gguf"), HasSubstr("\"gemma\"")));
}

TEST(GgufErrors, HugeArrayLengthIsRejectedWithoutAllocating) {
  // One metadata key whose array claims 2^60 strings.
  std::string kv;
  testing::AppendPod(kv, uint64_t{3});
  kv += "big";
  testing::AppendPod(kv, uint32_t{9});
  testing::AppendPod(kv, uint32_t{8});
  testing::AppendPod(kv, uint64_t{1} << 60);
  std::string file = "GGUF";
  testing::AppendPod(file, uint32_t{3});
  testing::AppendPod(file, uint64_t{0});
  testing::AppendPod(file, uint64_t{1});
  file += kv;
  TempDir dir;
  WriteBytes(dir.File("big.gguf"), file);
  EXPECT_THAT(Message(LoadGguf(dir.File("big.gguf"), nullptr).status()),
              AllOf(HasSubstr("big.gguf"), HasSubstr("claims")));
}

// ---- Hugging Face ----

// A valid HF folder from the stories model's weights (F32, no permutation needed for errors).
struct HfFixture {
  ModelWeights w;
  std::vector<testing::RawEntry> entries;
  HfFixture() {
    absl::StatusOr<ModelWeights> b = LoadLlama2c(ModelFile("stories260K.bin"));
    w = *std::move(b);
    entries = testing::HfEntries(w);
  }
  void Write(const TempDir& dir, const std::vector<testing::RawEntry>& e) const {
    WriteBytes(dir.File("config.json"), testing::HfConfigJson(w.config));
    WriteBytes(dir.File("model.safetensors"), testing::SafetensorsBytes(e));
  }
};

TEST(HfErrors, FixtureLoads) {
  HfFixture f;
  TempDir dir;
  f.Write(dir, f.entries);
  absl::StatusOr<ModelWeights> h = LoadHfFolder(dir.path());
  ASSERT_TRUE(h.ok()) << h.status();
}

TEST(HfErrors, MissingTensor) {
  HfFixture f;
  TempDir dir;
  std::vector<testing::RawEntry> e = f.entries;
  e.erase(e.begin() + 20);
  const std::string name = f.entries[20].name;
  f.Write(dir, e);
  const absl::Status s = LoadHfFolder(dir.path()).status();
  EXPECT_THAT(Message(s),
              AllOf(HasSubstr(dir.File("model.safetensors")), HasSubstr("missing tensor " + name)));
}

TEST(HfErrors, TensorShapeMismatch) {
  HfFixture f;
  TempDir dir;
  std::vector<testing::RawEntry> e = f.entries;
  for (testing::RawEntry& r : e) {
    if (r.name == "model.layers.2.self_attn.k_proj.weight") r.shape = {64, 32};  // transposed
  }
  f.Write(dir, e);
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("tensor shape mismatch"),
                    HasSubstr("model.layers.2.self_attn.k_proj.weight"),
                    HasSubstr("expected [32, 64]"), HasSubstr("got [64, 32]")));
}

TEST(HfErrors, UnsupportedDtype) {
  HfFixture f;
  TempDir dir;
  std::vector<testing::RawEntry> e = f.entries;
  for (testing::RawEntry& r : e) {
    if (r.name == "model.norm.weight") {
      r.dtype = "I8";
      r.bytes.resize(64);
    }
  }
  f.Write(dir, e);
  const absl::Status s = LoadHfFolder(dir.path()).status();
  EXPECT_THAT(Message(s), AllOf(HasSubstr("model.safetensors"), HasSubstr("unsupported dtype I8"),
                                HasSubstr("model.norm.weight")));
}

TEST(HfErrors, SizeDisagreesWithDtypeAndTruncation) {
  HfFixture f;
  TempDir dir;
  std::vector<testing::RawEntry> e = f.entries;
  e[1].dtype = "BF16";  // F32 bytes declared BF16: twice too many bytes
  f.Write(dir, e);
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr("model.safetensors"), HasSubstr(e[1].name), HasSubstr("BF16")));

  const std::string good = testing::SafetensorsBytes(f.entries);
  WriteBytes(dir.File("model.safetensors"), good.substr(0, good.size() - 10));
  const absl::Status s = LoadHfFolder(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("model.safetensors"), HasSubstr("truncated")));

  WriteBytes(dir.File("model.safetensors"), good.substr(0, 100));  // cut inside the header
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("truncated")));

  WriteBytes(dir.File("model.safetensors"), std::string("\x08\0\0\0\0\0\0\0{oops}  ", 16));
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr("model.safetensors: safetensors header: not valid JSON"),
                    HasSubstr("line 1, column 2")));
}

TEST(HfErrors, BadConfigJson) {
  HfFixture f;
  TempDir dir;
  f.Write(dir, f.entries);
  const std::string cfg = dir.File("config.json");

  WriteBytes(cfg, "{\"hidden_size\": 64,");
  absl::Status s = LoadHfFolder(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(cfg + ": not valid JSON"), HasSubstr("end of input")));

  WriteBytes(cfg, R"({"intermediate_size": 172, "num_hidden_layers": 5,
                     "num_attention_heads": 8, "vocab_size": 512})");
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr(cfg), HasSubstr("hidden_size"), HasSubstr("missing")));

  WriteBytes(cfg, R"({"hidden_size": "64", "intermediate_size": 172, "num_hidden_layers": 5,
                     "num_attention_heads": 8, "vocab_size": 512})");
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr(cfg), HasSubstr("hidden_size"), HasSubstr("integer")));

  WriteBytes(cfg, R"({"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5,
                     "num_attention_heads": 8, "vocab_size": 512,
                     "rope_scaling": {"type": "linear", "factor": 2.0}})");
  s = LoadHfFolder(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(cfg), HasSubstr("rope_scaling"), HasSubstr("linear")));

  WriteBytes(cfg, R"({"model_type": "mixtral", "hidden_size": 64})");
  s = LoadHfFolder(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), AllOf(HasSubstr(cfg), HasSubstr("mixtral")));

  std::remove(cfg.c_str());
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()), HasSubstr(cfg));
}

TEST(HfErrors, NoWeightsFileAndBadIndex) {
  TempDir dir;
  HfFixture f;
  WriteBytes(dir.File("config.json"), testing::HfConfigJson(f.w.config));
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr(dir.path()), HasSubstr("model.safetensors")));
  WriteBytes(dir.File("model.safetensors.index.json"),
             R"({"weight_map": {"model.embed_tokens.weight": "../../etc/passwd"}})");
  EXPECT_THAT(Message(LoadHfFolder(dir.path()).status()),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("not a file name")));
}

// ---- corruption never crashes (run under ASan / UBSan to make this meaningful) ----

// Truncations at many points and random byte flips in the header region: every load returns
// (most with an error); none reads out of bounds or aborts.
TEST(Corruption, RandomDamageReturnsStatus) {
  std::mt19937 rng(std::random_device{}());
  TempDir dir;
  HfFixture f;
  const std::string st = testing::SafetensorsBytes(f.entries);
  WriteBytes(dir.File("config.json"), testing::HfConfigJson(f.w.config));
  struct Source {
    std::string good;
    size_t header_bytes;  // where flips are aimed
    std::function<absl::Status(const std::string&)> load;
    std::string name;
  };
  const std::string gguf = ReadBytes(ModelFile("stories260K.gguf"));
  const std::string bin = ReadBytes(ModelFile("stories260K.bin"));
  const Source sources[] = {
      {gguf, 14200,
       [](const std::string& p) {
         text::SpmVocab v;
         return LoadGguf(p, &v).status();
       },
       "x.gguf"},
      {bin, 28, [](const std::string& p) { return LoadLlama2c(p).status(); }, "x.bin"},
      {st, 8 + 4000, [&](const std::string&) { return LoadHfFolder(dir.path()).status(); },
       "model.safetensors"},
  };
  for (const Source& src : sources) {
    const std::string path = dir.File(src.name);
    for (int i = 0; i < 60; ++i) {
      std::string bytes = src.good;
      if (i % 2 == 0) {
        bytes.resize(std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng));
      } else {
        for (int k = 0; k < 4; ++k) {
          const size_t at = std::uniform_int_distribution<size_t>(0, src.header_bytes - 1)(rng);
          bytes[at] = static_cast<char>(rng());
        }
      }
      WriteBytes(path, bytes);
      const absl::Status s = src.load(path);
      if (!s.ok()) {
        EXPECT_THAT(Message(s), HasSubstr(src.name == "model.safetensors" ? dir.path() : path));
      }
    }
  }
}

// ---- paths and validation ----

TEST(PathErrors, Nonexistent) {
  const std::string path = "/nonexistent/banyan/model";
  for (const absl::Status& s :
       {LoadModel(path).status(), LoadModel(path + ".gguf").status(),
        LoadLlama2c(path + ".bin").status(), LoadGguf(path + ".gguf", nullptr).status(),
        LoadHfFolder(path).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_THAT(Message(s), HasSubstr(path));
  }
}

TEST(PathErrors, UnrecognisedFile) {
  TempDir dir;
  WriteBytes(dir.File("weights.pt"), "PK\x03\x04");
  const absl::Status s = LoadModel(dir.File("weights.pt")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("weights.pt"), HasSubstr("unrecognised")));
}

TEST(ValidateWeights, NamesTheTensor) {
  ModelWeights w = TinyDummy();
  w.source = "mem";
  ASSERT_TRUE(ValidateWeights(w).ok());
  w.layers[1].w_down.shape = {176, 64};
  EXPECT_THAT(Message(ValidateWeights(w)),
              AllOf(HasSubstr("mem"), HasSubstr("tensor shape mismatch for layers.1.w_down"),
                    HasSubstr("expected [64, 176]"), HasSubstr("got [176, 64]")));
  w = TinyDummy();
  w.layers.pop_back();
  EXPECT_THAT(Message(ValidateWeights(w)), HasSubstr("config says 2"));
  w = TinyDummy();
  w.final_norm.data.pop_back();
  EXPECT_THAT(Message(ValidateWeights(w)), HasSubstr("final_norm"));
}

}  // namespace
}  // namespace banyan::model
