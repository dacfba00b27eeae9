// Reads SentencePiece `.model` files into SpmVocab without libsentencepiece or libprotobuf.
//
// Why our own reader: Debian's libsentencepiece bundles protobuf-lite 3.14 and aborts at start-up
// in any process that also loads the system protobuf 3.21 that gRPC needs, and the known
// workarounds (static hidden protobuf, dlopen with RTLD_DEEPBIND) do not survive ASan. So banyan
// decodes the protobuf wire format by hand, using only the handful of fields it needs.
//
// The schema subset (field numbers checked against sentencepiece_model.proto of 0.1.97 and by
// decoding tok512.model with `protoc --decode_raw`):
//   ModelProto      1: repeated SentencePiece  2: TrainerSpec  3: NormalizerSpec
//   SentencePiece   1: piece (string)  2: score (float)  3: type (enum, default NORMAL=1)
//   TrainerSpec     3: model_type (UNIGRAM=1 BPE=2 WORD=3 CHAR=4)  24: treat_whitespace_as_suffix
//                   35: byte_fallback  40: unk_id  41: bos_id  42: eos_id  43: pad_id
//                   44: unk_surface
//   NormalizerSpec  1: name  2: precompiled_charsmap  3: add_dummy_prefix
//                   4: remove_extra_whitespaces  5: escape_whitespaces
// Every other field is skipped. Absent fields take sentencepiece's proto defaults.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/tokenizer/vocab.h"

namespace banyan::text {

// Reads and parses the file at `path`. Errors name the file: NotFound when it cannot be opened,
// InvalidArgument when it is empty, truncated or not a SentencePiece model, Unimplemented for
// valid models that banyan cannot run (WORD/CHAR models, treat_whitespace_as_suffix).
absl::StatusOr<SpmVocab> ReadSpmModelFile(const std::string& path);

// Parses the serialized ModelProto in `bytes`; `source` names it in error messages.
absl::StatusOr<SpmVocab> ParseSpmModel(std::string_view bytes, std::string_view source);

// Checks the invariants the tokenizer relies on, wherever the vocabulary came from: pieces,
// scores and types have one entry per id; pieces are non-empty and unique; exactly one piece is
// kUnknown and it is unk_id; bos/eos/pad ids are -1 or in range; byte pieces are spelled
// "<0xXX>" (uppercase hex) and, with byte_fallback, all 256 exist.
absl::Status ValidateSpmVocab(const SpmVocab& vocab);

// The byte a kByte piece stands for, or -1 when `piece` is not spelled "<0xXX>".
int ParseBytePiece(std::string_view piece);

}  // namespace banyan::text
