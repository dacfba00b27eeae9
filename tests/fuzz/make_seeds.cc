// Writes the seed corpus of the fuzz targets: tests/fuzz/make_seeds <corpus dir>.
// Not run in CI: its output is committed under tests/fuzz/corpus/<target>/ (see
// docs/fuzzing.md). Seeds are small valid inputs, so the fuzzer starts past the format checks.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "banyan/v1/generation.pb.h"
#include "model/dummy_weights.h"
#include "model/model_io.h"
#include "model/safetensors_file.h"
#include "model/safetensors_loader.h"
#include "model/weights_layout.h"
#include "tests/model/test_util.h"
#include "tests/fuzz/tiny_model.h"

namespace banyan::fuzz {
namespace {

namespace fs = std::filesystem;
using model::ModelConfig;
using model::ModelWeights;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void OpenAiSeeds(const fs::path& dir) {
  const std::vector<std::string> bodies = {
      R"({"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8})",
      R"({"prompt": [1, 400, 32, 7], "max_tokens": 4, "temperature": 0, "echo": true,
          "logprobs": 2, "add_special_tokens": false})",
      R"({"prompt": ["Once", "upon"], "n": 2, "stop": ["\n", "."], "seed": 7, "top_p": 0.9,
          "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
          "repetition_penalty": 1.1, "stream": true, "stream_options": {"include_usage": true}})",
      R"({"prompt": [[1, 2, 3], [1, 5]], "max_tokens": 16.0, "priority": -3, "user": "u",
          "cache_salt": "s", "ignore_eos": true, "stop_token_ids": [2], "best_of": 1})",
      R"({"model": "stories260K", "messages": [{"role": "system", "content": "Tell stories."},
          {"role": "user", "content": "A story about a cat"}], "max_completion_tokens": 12})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
          {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}],
          "stream": true, "logprobs": true, "top_logprobs": 3, "stop": "end", "n": 3})",
      R"({"messages": [{"role": "user", "content": "caf\u00e9 \ud83d\ude00"}], "logit_bias": {}})",
  };
  for (size_t i = 0; i < bodies.size(); ++i) {
    Write(dir, "body" + std::to_string(i) + ".json", bodies[i]);
  }
}

void GrpcSeeds(const fs::path& dir) {
  v1::GenerateRequest text;
  text.set_model("stories260K");
  text.set_text("Once upon a time");
  text.set_request_id("req-1");
  text.mutable_sampling()->set_max_tokens(8);
  Write(dir, "text.pb", text.SerializeAsString());

  v1::GenerateRequest ids;
  for (int32_t t : {1, 400, 32, 7}) ids.mutable_token_ids()->add_ids(t);
  ids.set_add_bos(false);
  ids.set_priority(5);
  ids.set_user("u");
  ids.set_cache_salt("s");
  v1::SamplingParams* s = ids.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_p(0.9f);
  s->set_top_k(20);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.5f);
  s->set_seed(3);
  s->set_n(2);
  s->add_stop(".");
  s->add_stop_token_ids(2);
  s->set_ignore_eos(true);
  s->set_logprobs(2);
  Write(dir, "ids.pb", ids.SerializeAsString());

  v1::TokenizeRequest tok;
  tok.set_text("A story");
  tok.set_add_bos(true);
  Write(dir, "tokenize.pb", tok.SerializeAsString());
}

void TokenizerSeeds(const fs::path& dir) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "  two  spaces\tand\nnewlines  ",
      "caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
      "bad \xFF\xC0\xAF utf-8 \xED\xA0\x80",
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    Write(dir, "text" + std::to_string(i) + ".txt", texts[i]);
  }
}

ModelConfig TinyConfig() {
  absl::StatusOr<ModelConfig> c = model::ParseHfConfig(kTinyHfConfig, "tiny_model.h");
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
    std::exit(1);
  }
  return *c;
}

void GgufSeeds(const fs::path& dir, const ModelWeights& w) {
  using namespace model::testing;
  Write(dir, "tiny_f32.gguf", GgufFromWeights(w, kGgmlF32));
  Write(dir, "tiny_f16_v2.gguf", GgufFromWeights(w, kGgmlF16, "", 0, /*version=*/2));
  Write(dir, "tiny_bf16.gguf", GgufFromWeights(w, kGgmlBF16));
  {  // Q8_0 needs rows of 32: widen the tiny model
    ModelConfig c = w.config;
    c.dim = 32;
    c.hidden_dim = 32;
    Write(dir, "tiny_q8_0.gguf", GgufFromWeights(model::MakeDummyWeights(c, 12), kGgmlQ8_0));
  }
  // The same shape as Qwen 3 (q/k norm tensors, rotate-half order) and Qwen 2.5 (q/k/v biases).
  for (const char* arch : {"qwen2", "qwen3"}) {
    ModelConfig c = w.config;
    c.arch = arch;
    c.qkv_bias = c.arch == "qwen2";
    c.qk_norm = c.arch == "qwen3";
    c.rope_style = model::RopeStyle::kHalf;
    Write(dir, std::string("tiny_") + arch + ".gguf",
          GgufFromWeights(model::MakeDummyWeights(c, 11), kGgmlF32));
  }
}

void SafetensorsSeeds(const fs::path& dir, const ModelWeights& w) {
  fs::create_directories(dir);
  std::vector<model::SafetensorsItem> items;
  for (const model::TensorSlot& slot : model::ListTensorSlots(w.config)) {
    items.push_back({model::HfTensorName(slot), &model::SlotTensor(w, slot), nullptr});
  }
  for (auto [name, dtype] : {std::pair{"tiny_f32.safetensors", model::WeightDtype::kF32},
                             std::pair{"tiny_bf16.safetensors", model::WeightDtype::kBF16}}) {
    absl::Status s = model::WriteSafetensors((dir / name).string(), items, dtype);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  // The same model with FP8 projections (F8_E4M3 codes and F32 per-channel scales), as an FP8
  // checkpoint stores them; the fuzzer's config.json has no quantization_config, so the loader
  // refuses it, after the reader has parsed every entry.
  ModelWeights fp8 = w;
  if (!model::QuantizeWeightsFp8(&fp8).ok()) std::exit(1);
  const absl::Status s = model::WriteHfFolder(fp8, (dir / "fp8_folder").string());
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
  fs::rename(dir / "fp8_folder" / "model.safetensors", dir / "tiny_fp8.safetensors");
  fs::remove_all(dir / "fp8_folder");
}

// llama2.c layout (llama2c_loader.h); `shared` false writes a negative vocab_size and wcls.
std::string Llama2cBytes(const ModelConfig& c, bool shared) {
  const int64_t head_dim = c.dim / c.n_heads;
  const int64_t kv_dim = head_dim * c.n_kv_heads;
  const int64_t L = c.n_layers;
  const int32_t header[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                             shared ? c.vocab_size : -c.vocab_size, c.max_seq_len};
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  int64_t floats = int64_t{c.vocab_size} * c.dim + L * c.dim + 2 * L * c.dim * c.dim +
                   2 * L * kv_dim * c.dim + L * c.dim + 3 * L * c.hidden_dim * c.dim + c.dim +
                   int64_t{c.max_seq_len} * head_dim;
  if (!shared) floats += int64_t{c.vocab_size} * c.dim;
  for (int64_t i = 0; i < floats; ++i) {
    const float v = static_cast<float>(i % 7) * 0.125f - 0.375f;
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  return out;
}

}  // namespace
}  // namespace banyan::fuzz

int main(int argc, char** argv) {
  using namespace banyan::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const std::string models = std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/";
  OpenAiSeeds(root / "openai_request");
  GrpcSeeds(root / "grpc_translate");
  TokenizerSeeds(root / "tokenizer");
  Write(root / "spm_model", "tok512.model", ReadAll(models + "tok512.model"));

  const ModelWeights w = banyan::model::MakeDummyWeights(TinyConfig(), 1);
  GgufSeeds(root / "gguf", w);
  SafetensorsSeeds(root / "safetensors", w);
  Write(root / "llama2c", "tiny_shared.bin", Llama2cBytes(w.config, true));
  Write(root / "llama2c", "tiny_wcls.bin", Llama2cBytes(w.config, false));
  // The real checkpoint's header alone: the loader must say it is truncated.
  Write(root / "llama2c", "stories260K_header.bin",
        ReadAll(models + "stories260K.bin").substr(0, 28));
  return 0;
}
