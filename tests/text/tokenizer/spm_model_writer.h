// Test helper: serializes an SpmVocab as a SentencePiece ModelProto (protobuf wire format), so
// tests can build models with chosen features (unused pieces, user-defined pieces, odd specs)
// that both banyan and libsentencepiece load. Writes only the fields spm_model_reader.h reads,
// plus TrainerSpec.vocab_size and NormalizerSpec.name.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "text/tokenizer/vocab.h"

namespace banyan::text::testing {

inline void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

inline void PutTag(uint32_t field, int wire_type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type), out);
}

inline void PutVarintField(uint32_t field, int64_t v, std::string* out) {
  PutTag(field, 0, out);
  PutVarint(static_cast<uint64_t>(v), out);  // negative int32s: ten bytes, as protobuf does
}

inline void PutBytesField(uint32_t field, std::string_view bytes, std::string* out) {
  PutTag(field, 2, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

inline void PutFloatField(uint32_t field, float f, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  PutTag(field, 5, out);
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

inline std::string SerializeSpmModel(const SpmVocab& vocab) {
  std::string model;
  for (size_t id = 0; id < vocab.pieces.size(); ++id) {
    std::string piece;
    PutBytesField(1, vocab.pieces[id], &piece);
    PutFloatField(2, vocab.scores[id], &piece);
    PutVarintField(3, static_cast<int>(vocab.types[id]), &piece);
    PutBytesField(1, piece, &model);
  }
  std::string trainer;
  PutVarintField(3, static_cast<int>(vocab.model_type), &trainer);
  PutVarintField(4, static_cast<int64_t>(vocab.pieces.size()), &trainer);
  PutVarintField(35, vocab.byte_fallback ? 1 : 0, &trainer);
  PutVarintField(40, vocab.unk_id, &trainer);
  PutVarintField(41, vocab.bos_id, &trainer);
  PutVarintField(42, vocab.eos_id, &trainer);
  PutVarintField(43, vocab.pad_id, &trainer);
  PutBytesField(44, vocab.unk_surface, &trainer);
  PutBytesField(2, trainer, &model);
  std::string normalizer;
  PutBytesField(1, vocab.precompiled_charsmap.empty() ? "identity" : "custom", &normalizer);
  PutBytesField(2, vocab.precompiled_charsmap, &normalizer);
  PutVarintField(3, vocab.add_dummy_prefix ? 1 : 0, &normalizer);
  PutVarintField(4, vocab.remove_extra_whitespaces ? 1 : 0, &normalizer);
  PutVarintField(5, vocab.escape_whitespaces ? 1 : 0, &normalizer);
  PutBytesField(3, normalizer, &model);
  return model;
}

}  // namespace banyan::text::testing
