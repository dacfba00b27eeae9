// The text stages of a tokenizer.json BPE tokenizer before the model runs: regular expressions,
// the GPT-2 byte-to-unicode map, normalizers and pre-tokenizers (see bpe_spec.h), with the
// semantics of the Hugging Face `tokenizers` library.
//
// Regular expressions go through PCRE2 with its JIT, compiled with UTF and Unicode properties
// (\p{L}, \p{N}) and supporting the look-ahead the Llama 3 and Qwen patterns use (\s+(?!\S)).
// `tokenizers` compiles patterns with Oniguruma, whose \s is Unicode White_Space; PCRE2's \s
// leaves out U+0085, so \s and \S are rewritten to \p{White_Space} and \P{White_Space} before
// compiling. Unicode normalization (NFC and friends) and lowercasing use utf8proc; lowercasing is
// per code point (simple case mapping). Composition works around a utf8proc bug that deleted
// U+11A7 after a Hangul LV syllable (see UnicodeNormalize in the .cc).
//
// All text here is valid UTF-8: BpeTokenizer replaces invalid input bytes with U+FFFD first.
// Everything is immutable after construction and safe to use from many threads.
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

namespace banyan::text {

class Regex {
 public:
  // Compiles `pattern` (PCRE2 syntax, UTF, Unicode properties). Errors quote the pattern and
  // say where it fails.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);

  // The non-empty matches in `text`, left to right, as (begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

// The GPT-2 byte-level alphabet: every byte is spelled by one printable code point.
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();
  // The UTF-8 spelling of byte `b`.
  std::string_view Spell(uint8_t b) const { return spelling_[b]; }
  // Appends the spelling of every byte of `bytes`.
  void SpellAll(std::string_view bytes, std::string* out) const;
  // The bytes `piece` spells; false (and *out untouched) when a character is not in the alphabet.
  bool Unspell(std::string_view piece, std::string* out) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> spelling_;
  absl::flat_hash_map<uint32_t, uint8_t> byte_of_;  // code point -> byte
};

class TextPipeline {
 public:
  // Compiles the regexes of `spec`'s normalizers and pre-tokenizers.
  static absl::StatusOr<TextPipeline> Create(const BpeSpec& spec);

  bool has_normalizers() const { return !normalizers_.empty(); }
  // Applies the normalizers in order.
  std::string Normalize(std::string text) const;
  // Splits normalized text into the words BPE runs on. `at_text_start`: the text begins the
  // input (Metaspace's "first" prepend scheme).
  std::vector<std::string> PreTokenize(std::string text, bool at_text_start) const;

 private:
  struct Normalizer {
    NormalizerStep step;
    std::shared_ptr<Regex> regex;  // kReplace with a regex
  };
  struct PreTokenizer {
    PreTokenizerStep step;
    std::shared_ptr<Regex> regex;  // kSplit with a regex; kByteLevel with use_regex; kDigits
  };
  TextPipeline() = default;

  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_tokenizers_;
};

// Splits `text` at the matches of `regex` (or of the literal `literal` when regex is null) the way
// a Split pre-tokenizer with `behavior` and `invert` does; empty pieces are dropped.
std::vector<std::string> SplitText(std::string_view text, const Regex* regex,
                                   std::string_view literal, SplitBehavior behavior, bool invert);

// `text` without leading (`left`) and trailing (`right`) Unicode White_Space.
std::string_view TrimWhiteSpace(std::string_view text, bool left, bool right);

// `text` with every invalid UTF-8 sequence replaced by U+FFFD (one per byte that starts no valid
// character); `text` itself when it is valid.
std::string SanitizeUtf8(std::string_view text);

}  // namespace banyan::text
