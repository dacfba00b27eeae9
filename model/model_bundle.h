// A model together with its tokenizer, found the way users expect:
//  - an explicit tokenizer path wins;
//  - a Hugging Face folder: <dir>/tokenizer.json (with tokenizer_config.json for bos/eos) when
//    present, else <dir>/tokenizer.model;
//  - a GGUF file: the vocabulary in its tokenizer.ggml.* metadata (SentencePiece "llama" or
//    byte-level BPE "gpt2");
//  - any other file (llama2.c .bin): tokenizer.json or tokenizer.model beside it, else the only
//    *.model file there.
// A SentencePiece tokenizer must have exactly the model's vocabulary size; a tokenizer.json may
// have fewer ids than a padded embedding (Qwen), never more.
// And the model's chat template, a Jinja text (rendered by text/jinja):
//  - GGUF: the tokenizer.chat_template metadata;
//  - otherwise, in the model's folder (the folder itself, or the one holding the file):
//    chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or a list of
//    {"name", "template"} from which "default" is taken; any other non-null value is an error
//    naming the file and the field), with its "bos_token" and "eos_token" (a string or
//    {"content": ...}).
// Every JSON file is read through common/json_limits.h (depth and size limits, errors naming
// the file); a config.json's quantization_config is read by the safetensors loader (FP8 only,
// model/fp8_checkpoint.h; any other is refused naming the field).
// `quantization` is --quantization: kFp8 quantizes the projections of an unquantized model to
// FP8 after the load (QuantizeWeightsFp8, model/quantized.h); an FP8 checkpoint stays as it is.
// Token texts not given there are the tokenizer's BOS / EOS pieces ("" when it has none).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"

namespace banyan::model {

struct ModelBundle {
  ModelWeights weights;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::string tokenizer_path;  // where it came from ("<gguf metadata>" for GGUF)
  std::string chat_template;   // Jinja text; empty when the model carries none
  std::string chat_template_source;  // the file (or metadata key) it came from
  std::string bos_token;       // the text of BOS / EOS, as templates see them
  std::string eos_token;
};

absl::StatusOr<ModelBundle> LoadModelBundle(
    const std::string& model_path, const std::string& tokenizer_path = "",
    WeightQuantization quantization = WeightQuantization::kNone);

// Dummy models, for benchmarks at real shapes without real weights:
//   dummy:<shape>[:vocab=<n>][:context=<n>][:seed=<n>]
// with a shape NamedShapeConfig knows (e.g. dummy:llama-2-7b-shape:vocab=128256). The weights
// are synthetic (MakeDummyWeights, or generated on the GPU by the CUDA backend) and the tokenizer
// is SyntheticTokenizer(vocab), or a real tokenizer file given to LoadDummyBundle (at most vocab
// ids; its BOS and EOS become the config's). IsDummyModel tells such a path apart from a file.
bool IsDummyModel(const std::string& model_path);
struct DummyModelSpec {
  ModelConfig config;
  uint64_t seed = 1;
};
absl::StatusOr<DummyModelSpec> ParseDummyModel(const std::string& model_path);
// The config of banyand's spelling dummy:<shape>[:vocab=N]... or of a bare shape name (the
// benchmarks' --shape).
absl::StatusOr<ModelConfig> ShapeOrDummyConfig(const std::string& spec);
// A SentencePiece BPE vocabulary of `vocab_size` pieces (>= 259): <unk>, <s>, </s>, the 256 byte
// pieces (byte fallback, so any text encodes), then synthetic pieces "▁t<i>". Text round-trips;
// generated text from dummy weights is meaningless by design.
absl::StatusOr<std::unique_ptr<text::Tokenizer>> SyntheticTokenizer(int vocab_size);
// The bundle of a dummy model: config, tokenizer, and host weights only when `host_weights`
// (the CPU backend needs them; the CUDA backend generates its own on the device). FP8 dummy
// weights are `dummy:<shape>` with --quantization fp8 (kFp8): the host weights are
// MakeDummyWeights(..., kFp8), the projections never all in fp32 at once. Without host weights
// the flag changes nothing here: the CUDA backend's device-generated weights are bf16 (its FP8
// GEMMs are not written yet).
absl::StatusOr<ModelBundle> LoadDummyBundle(
    const std::string& model_path, bool host_weights, const std::string& tokenizer_path = "",
    WeightQuantization quantization = WeightQuantization::kNone);

// The bundled stories260K checkpoint (models/stories260K/stories260K.bin): first in the folders
// holding the executable, nearest first (build/<dir>/<exe> inside a checkout finds the
// checkout's), then in the working directory. Empty when not found.
std::string FindBundledModel(const char* argv0);

}  // namespace banyan::model
