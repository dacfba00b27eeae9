// A SentencePiece vocabulary, independent of where it was read from (a `.model` file or a
// GGUF's tokenizer.ggml.* metadata).
#pragma once

#include <string>
#include <vector>

namespace banyan::text {

enum class SpmModelType { kUnigram = 1, kBpe = 2 };

// Mirrors sentencepiece's ModelProto.SentencePiece.Type.
enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct SpmVocab {
  SpmModelType model_type = SpmModelType::kBpe;
  std::vector<std::string> pieces;  // UTF-8, with U+2581 for spaces
  std::vector<float> scores;
  std::vector<PieceType> types;
  int unk_id = 0;
  int bos_id = 1;
  int eos_id = 2;
  int pad_id = -1;
  bool byte_fallback = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  // NormalizerSpec.precompiled_charsmap: sentencepiece's compiled normalization rules (a
  // darts-clone trie plus replacement strings). Empty means the identity normalizer.
  std::string precompiled_charsmap;
  // What Decode() prints for the unknown piece (TrainerSpec.unk_surface).
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "
};

}  // namespace banyan::text
