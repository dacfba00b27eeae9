// BpeTokenizer: Hugging Face `tokenizers` BPE, natively, from a tokenizer.json document or a
// GGUF "gpt2" vocabulary (both described by a BpeSpec).
//
// Written here rather than linked: the reference is a Rust crate with no C/C++ API packaged for
// Debian, and the parts needed (BPE merges, the byte-level alphabet, a handful of normalizers,
// pre-tokenizers and decoders) are small; regular expressions and Unicode normalization come from
// PCRE2 and utf8proc (see text_pipeline.h).
//
// Encoding, as `tokenizers` does with add_special_tokens:
//  1. Invalid UTF-8 input bytes become U+FFFD (`tokenizers` takes only valid strings).
//  2. Added tokens (special or not) are cut out of the raw text, leftmost-longest, before anything
//     else: they are never split, normalized or merged, wherever they appear in the text.
//     lstrip/rstrip tokens swallow the whitespace beside them. Tokens flagged `normalized` are
//     matched in the normalized text of the pieces between the others.
//  3. Each remaining piece is normalized and pre-tokenized into words.
//  4. BPE per word: with ignore_merges a word that is itself a piece is one token; otherwise the
//     word starts as its characters (a character that is not a piece becomes its "<0xXX>" byte
//     pieces with byte_fallback, else the unknown piece, consecutive ones fused with fuse_unk;
//     without an unknown piece it is dropped) and the adjacent pair with the lowest merge rank is
//     merged, leftmost first, until none applies.
//  5. `add_bos` adds the post-processor's ids before and after.
// Decoding skips special tokens (transformers' skip_special_tokens=True), emits other added
// tokens verbatim, and maps pieces back through the decoder (bytes for byte-level pieces and for
// "<0xXX>" pieces; text with replacements for others). Byte runs decode as utf8::AppendByteRun
// does (U+FFFD per byte that starts no valid character), which equals `tokenizers` whenever the
// bytes are valid UTF-8. transformers' clean_up_tokenization_spaces is not applied.
//
// Not supported (refused at load with the name): models other than BPE, BPE dropout,
// continuing_subword_prefix / end_of_word_suffix, and normalizers, pre-tokenizers, decoders and
// post-processors not listed in hf_json_reader.h. Ignored: added tokens' single_word flag.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/tokenizer/bpe_spec.h"
#include "text/tokenizer/byte_trie.h"
#include "text/tokenizer/string_hash.h"
#include "text/tokenizer/text_pipeline.h"
#include "text/tokenizer/tokenizer.h"

namespace banyan::text {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json) and, when present beside it, tokenizer_config.json for the
  // bos/eos tokens. Errors name the file.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJsonFile(const std::string& path);
  // Validates `spec` (ids, merges, added tokens, regexes) and builds the tokenizer.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(BpeSpec spec);

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  int bos_id() const override { return spec_.bos_id; }
  int eos_id() const override { return spec_.eos_id; }
  int unk_id() const override { return unk_id_; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  std::string_view Piece(int id) const override;
  std::string TokenBytes(int id) const override;
  std::string Describe() const override;
  std::vector<std::pair<std::string, int32_t>> SpecialTokens() const override;
  void DecodeStep(int32_t id, DecodeState* state, std::string* out) const override;

 private:
  // What an id is, for decoding.
  enum class IdKind : uint8_t { kNone, kPiece, kByte, kAdded, kSpecial };

  BpeTokenizer(BpeSpec spec, TextPipeline pipeline);
  absl::Status BuildIndexes();

  // Appends the ids of one piece of text that holds no raw-text added token.
  void EncodeText(std::string_view text, bool at_text_start, std::vector<int32_t>* ids) const;
  // Appends the BPE ids of one pre-tokenized word.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  int32_t PieceId(std::string_view piece) const;
  // Appends `text` to *out, dropping the leading characters the decoder strips.
  void Emit(std::string_view text, DecodeState* state, std::string* out) const;

  BpeSpec spec_;
  TextPipeline pipeline_;
  std::vector<std::string> pieces_;  // id -> spelling (model piece or added token)
  std::vector<IdKind> kinds_;        // id -> kind
  std::vector<int16_t> byte_of_;     // id -> byte of a "<0xXX>" piece (byte fallback), else -1
  absl::flat_hash_map<std::string, int32_t, StringViewHash, StringViewEq> vocab_;  // model only
  // (left id, right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_piece_ids_{};  // byte -> id of "<0xXX>", -1 when absent
  int32_t unk_id_ = -1;
  ByteTrie raw_added_;         // added tokens matched in the raw text -> index in added_tokens
  ByteTrie normalized_added_;  // added tokens matched in normalized text (content normalized)
  std::array<bool, 256> raw_added_first_{};  // bytes that start some raw added token
};

}  // namespace banyan::text
