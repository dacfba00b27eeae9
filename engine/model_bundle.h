// A model together with its tokenizer, found the way users expect:
//  - an explicit tokenizer path wins;
//  - a Hugging Face folder: <dir>/tokenizer.model;
//  - a GGUF file: the SentencePiece vocabulary in its tokenizer.ggml.* metadata;
//  - any other file (llama2.c .bin): tokenizer.model beside it, else the only *.model file there.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace banyan::engine {

struct ModelBundle {
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_path;  // where it came from ("<gguf metadata>" for GGUF)
};

absl::StatusOr<ModelBundle> LoadModelBundle(const std::string& model_path,
                                            const std::string& tokenizer_path = "");

// The bundled stories260K checkpoint, looked up from the working directory and from the
// executable's location (build/<dir>/<exe> inside a checkout). Empty when not found.
std::string FindBundledModel(const char* argv0);

}  // namespace banyan::engine
