// Reading Hugging Face tokenizer.json documents into a BpeSpec, and the named pre-tokenizer
// presets GGUF files refer to (tokenizer.ggml.pre).
//
// Supported components (anything else is refused with an error naming it):
//   model:          BPE (vocab, merges as "a b" strings or [a, b] pairs, unk_token, fuse_unk,
//                   byte_fallback, ignore_merges; no dropout, no subword prefix/suffix)
//   normalizer:     Sequence, Prepend, Replace (string or regex), NFC, NFD, NFKC, NFKD, Lowercase,
//                   Strip
//   pre_tokenizer:  Sequence, Split (string or regex; every behaviour; invert), ByteLevel,
//                   Metaspace, Digits
//   post_processor: Sequence, TemplateProcessing (its "single" template), ByteLevel (no ids),
//                   RobertaProcessing / BertProcessing (cls ... sep)
//   decoder:        Sequence, ByteLevel, ByteFallback, Fuse, Strip (leading only, after Fuse),
//                   Replace (string pattern), Metaspace
// tokenizer_config.json, when given, names bos_token and eos_token (strings or {"content": ...});
// without it the bos is the first id the post-processor puts before the text, and there is no eos.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/tokenizer/bpe_spec.h"

namespace banyan::text {

// Parses a tokenizer.json document; `config_json` is tokenizer_config.json's text or empty.
// `source` names the document in errors, `config_source` the config. Both are parsed with
// common/json_limits.h's depth and size limits (an error naming the file and the limit).
absl::StatusOr<BpeSpec> ParseHfTokenizerJson(std::string_view json, std::string_view config_json,
                                             const std::string& source,
                                             const std::string& config_source =
                                                 "tokenizer_config.json");

// Reads `path` and, when it exists, tokenizer_config.json in the same folder.
absl::StatusOr<BpeSpec> ReadHfTokenizerFiles(const std::string& path);

// Sets the normalizers and pre-tokenizers that the GGUF pre-tokenizer name `pre` stands for:
// "llama-bpe" (Llama 3), "qwen2", "gpt-2" / "default" (GPT-2's byte-level regex). Other names are
// refused, naming the known ones.
absl::Status ApplyGgufPreTokenizer(std::string_view pre, BpeSpec* spec);

}  // namespace banyan::text
