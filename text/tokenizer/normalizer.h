// SpmNormalizer: the text transformation sentencepiece applies before a model segments it.
//
// In order, as sentencepiece 0.1.97's Normalizer does:
//   1. The input is consumed one unit at a time. A unit is the longest user-defined piece at
//      that point (kept verbatim), else the longest rule of the precompiled charsmap (replaced by
//      its target, e.g. NFKC folding for "nmt_nfkc" models), else one UTF-8 character; a byte
//      that starts no valid character becomes U+FFFD.
//   2. With remove_extra_whitespaces: leading units that normalize to " " are dropped, a run of
//      spaces collapses to one, and trailing spaces are dropped. Only U+0020 counts as a space
//      (tabs and newlines stay, unless the charsmap maps them to spaces).
//   3. With add_dummy_prefix: one space is put in front of non-empty text.
//   4. With escape_whitespaces: every space becomes U+2581 "▁".
// The charsmap, when present, is interpreted natively (a darts-clone double-array trie followed
// by NUL-terminated replacement strings), so "nmt_nfkc" models normalize like sentencepiece.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer/byte_trie.h"
#include "text/tokenizer/vocab.h"

namespace banyan::text {

class SpmNormalizer {
 public:
  // Takes the spec flags, the charsmap and the user-defined pieces from `vocab`. Fails when the
  // charsmap is malformed.
  static absl::StatusOr<SpmNormalizer> Create(const SpmVocab& vocab);

  // Returns the normalized text; empty when `text` holds nothing but removable whitespace.
  std::string Normalize(std::string_view text) const;

 private:
  SpmNormalizer() = default;

  // The replacement for the unit at the start of `input` (non-empty), and the bytes it consumes.
  std::pair<std::string_view, size_t> NormalizePrefix(std::string_view input) const;

  // Longest charsmap rule matching the start of `input`: its length (0 if none) and replacement.
  size_t MatchCharsmap(std::string_view input, std::string_view* replacement) const;

  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
  ByteTrie user_defined_;             // user-defined pieces -> id
  std::vector<uint32_t> trie_units_;  // darts-clone units of the charsmap; empty: identity
  std::string replacements_;          // NUL-terminated strings the trie values point into
};

}  // namespace banyan::text
