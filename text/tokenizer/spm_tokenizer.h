// SpmTokenizer: SentencePiece encoding and decoding, implemented natively.
//
// Decision: banyan does not link libsentencepiece into the daemon. Debian's libsentencepiece
// bundles protobuf-lite 3.14 and aborts at start-up in any process that also loads the system
// protobuf 3.21 that gRPC needs ("compiled against version 3.14.0 ... not compatible"); linking
// protobuf statically with hidden symbols or dlopen'ing a wrapper with RTLD_DEEPBIND works in
// release builds, but both break under AddressSanitizer. So the `.model` file is read by our own
// protobuf wire decoder (spm_model_reader.h) and the algorithms below reproduce sentencepiece
// 0.1.97. libsentencepiece appears only in tokenizer_oracle_test, a binary with no gRPC, which
// compares this class with it on randomized text.
//
// Contracts (all as sentencepiece 0.1.97 behaves; see normalizer.h for normalization):
// - Encode normalizes the text, then segments it:
//   * BPE: start from single characters (user-defined pieces stay whole and never merge) and
//     repeatedly merge the adjacent pair whose concatenation is the vocabulary piece with the
//     highest score, leftmost first on ties; merges into kUnused pieces are undone at the end.
//   * Unigram: the Viterbi segmentation maximizing the sum of piece scores; a character no piece
//     covers is an unknown piece scoring (lowest score - 10); user-defined pieces get a bonus
//     that makes them always win.
//   An unknown segment becomes one <0xXX> piece per UTF-8 byte with byte_fallback; without it,
//   each run of adjacent unknown segments becomes a single unk_id.
// - Decode concatenates the pieces' text: "▁" becomes " ", control pieces (BOS, EOS, ...) give
//   nothing, the unknown piece gives vocab.unk_surface, and runs of byte pieces are reassembled
//   into UTF-8 where each byte that starts no valid character becomes U+FFFD. The dummy prefix:
//   with add_dummy_prefix or remove_extra_whitespaces, while the output is still empty, a piece
//   loses its leading "▁"; without remove_extra_whitespaces only the first such "▁" is dropped
//   (so " x" encoded as "▁▁x" decodes back to " x"). Ids outside the vocabulary are skipped.
// - Normalization applies the model's precompiled charsmap natively, so "nmt_nfkc" (the
//   spm_train default) and custom rule tables behave as in sentencepiece; the bundled
//   stories260K model uses "identity" (no charsmap).
// - Limitations: WORD and CHAR models and treat_whitespace_as_suffix are rejected at load; the
//   model's denormalizer_spec is ignored (trained models leave it empty); no sampling or n-best
//   encoding; ids outside the vocabulary are skipped rather than reported.
// A Tokenizer is immutable after construction and safe to use from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/tokenizer/byte_trie.h"
#include "text/tokenizer/normalizer.h"
#include "text/tokenizer/string_hash.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/vocab.h"

namespace banyan::text {

class SpmTokenizer final : public Tokenizer {
 public:
  // Reads a SentencePiece `.model` file. Errors name the file.
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> FromFile(const std::string& path);
  // Builds from a vocabulary from any source (e.g. GGUF metadata); validates it first.
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> FromVocab(SpmVocab vocab);

  // Token ids of `text`, preceded by bos_id() when `add_bos` (and the model has one).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;

  int bos_id() const override { return vocab_.bos_id; }
  int eos_id() const override { return vocab_.eos_id; }
  int unk_id() const override { return vocab_.unk_id; }
  int vocab_size() const override { return static_cast<int>(vocab_.pieces.size()); }
  std::string_view Piece(int id) const override;
  std::string TokenBytes(int id) const override;
  std::string Describe() const override;
  std::vector<std::pair<std::string, int32_t>> SpecialTokens() const override;
  void DecodeStep(int32_t id, DecodeState* state, std::string* out) const override;
  const SpmVocab& vocab() const { return vocab_; }

 private:

  // A piece of the normalized text and the id it maps to (unk_id when not in the vocabulary).
  using Segment = std::pair<std::string_view, int32_t>;
  // For each kUnused piece reached by a BPE merge: the two pieces it was merged from.
  using RevMerges =
      absl::flat_hash_map<std::string_view, std::pair<std::string_view, std::string_view>,
                          StringViewHash, StringViewEq>;

  SpmTokenizer(SpmVocab vocab, SpmNormalizer normalizer);
  void BuildIndexes();

  std::vector<Segment> SegmentBpe(std::string_view normalized) const;
  std::vector<Segment> SegmentUnigram(std::string_view normalized) const;
  void Resegment(std::string_view piece, const RevMerges& rev_merges,
                 std::vector<Segment>* out) const;

  // sentencepiece's PieceToId: control/unknown/byte pieces first, then the others, else unk_id.
  int32_t PieceToId(std::string_view piece) const;
  bool IsValidId(int32_t id) const { return id >= 0 && id < vocab_size(); }
  // The byte a kByte piece stands for; -1 for other ids.
  int ByteOf(int32_t id) const { return byte_value_[id]; }
  // Appends the text of the non-byte piece `id`. `text_empty`: nothing has been output so far.
  void AppendPieceText(int32_t id, bool text_empty, DecodeState* state, std::string* out) const;

  SpmVocab vocab_;
  SpmNormalizer normalizer_;
  // kNormal, kUserDefined and kUnused pieces (sentencepiece's `pieces_`), which segmentation may
  // produce, and the others (`reserved_id_map_`), which only PieceToId sees.
  absl::flat_hash_map<std::string, int32_t, StringViewHash, StringViewEq> piece_ids_;
  absl::flat_hash_map<std::string, int32_t, StringViewHash, StringViewEq> reserved_ids_;
  ByteTrie user_defined_;                // BPE: pieces that are never split or merged
  ByteTrie unigram_pieces_;              // unigram: the keys of piece_ids_
  std::array<int32_t, 256> byte_ids_{};  // byte -> id of its <0xXX> piece (unk_id if none)
  std::vector<int16_t> byte_value_;      // id -> byte of a kByte piece, -1 otherwise
  std::vector<std::string> piece_text_;  // id -> the piece with every "▁" a space
  float min_score_ = 0.0f;               // unigram: over kNormal pieces, as sentencepiece
  float max_score_ = 0.0f;
};

}  // namespace banyan::text
