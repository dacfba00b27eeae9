#include "text/tokenizer/normalizer.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace banyan::text {
namespace {

// A darts-clone double-array unit packs, in 32 bits: the label byte of the edge into this node
// (bits 0-7, plus bit 31 set on value units so they never match a label), a has-leaf flag
// (bit 8), and the XOR offset to the children (bits 10-31, scaled by 2^8 when bit 9 is set).
// A leaf's value lives in the unit reached from the node by label 0.
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

// sentencepiece looks at no more than this many matches per position; the longest of them wins.
constexpr int kMaxCharsmapMatches = 32;

}  // namespace

absl::StatusOr<SpmNormalizer> SpmNormalizer::Create(const SpmVocab& vocab) {
  SpmNormalizer n;
  n.add_dummy_prefix_ = vocab.add_dummy_prefix;
  n.remove_extra_whitespaces_ = vocab.remove_extra_whitespaces;
  n.escape_whitespaces_ = vocab.escape_whitespaces;
  for (size_t id = 0; id < vocab.pieces.size() && id < vocab.types.size(); ++id) {
    if (vocab.types[id] == PieceType::kUserDefined) {
      n.user_defined_.Insert(vocab.pieces[id], static_cast<int32_t>(id));
    }
  }
  const std::string& blob = vocab.precompiled_charsmap;
  if (blob.empty()) return n;
  // Layout: trie size in bytes (uint32, little-endian), the trie units, the replacement strings.
  uint32_t trie_bytes = 0;
  if (blob.size() > 4) {
    for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<uint8_t>(blob[i]);
  }
  if (blob.size() <= 4 || trie_bytes == 0 || trie_bytes > blob.size() - 4 || trie_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precompiled_charsmap is malformed (", blob.size(), " bytes, trie of ", trie_bytes, ")"));
  }
  n.trie_units_.resize(trie_bytes / 4);
  for (size_t u = 0; u < n.trie_units_.size(); ++u) {
    uint32_t unit = 0;
    for (int i = 3; i >= 0; --i) unit = (unit << 8) | static_cast<uint8_t>(blob[4 + 4 * u + i]);
    n.trie_units_[u] = unit;
  }
  n.replacements_ = blob.substr(4 + trie_bytes);
  return n;
}

size_t SpmNormalizer::MatchCharsmap(std::string_view input, std::string_view* replacement) const {
  const size_t num_units = trie_units_.size();
  size_t longest = 0;
  uint32_t longest_value = 0;
  int matches = 0;
  size_t node = Offset(trie_units_[0]);
  for (size_t i = 0; i < input.size() && matches < kMaxCharsmapMatches; ++i) {
    const auto label = static_cast<uint8_t>(input[i]);
    node ^= label;
    if (node >= num_units) break;
    const uint32_t unit = trie_units_[node];
    if (Label(unit) != label) break;
    node ^= Offset(unit);
    if (HasLeaf(unit)) {
      if (node >= num_units) break;
      longest = i + 1;
      longest_value = Value(trie_units_[node]);
      ++matches;
    }
  }
  if (longest == 0) return 0;
  // A value outside the string table (only in a corrupt model) maps to the empty string.
  if (longest_value >= replacements_.size()) {
    *replacement = std::string_view();
  } else {
    std::string_view rest = std::string_view(replacements_).substr(longest_value);
    *replacement = rest.substr(0, rest.find('\0'));
  }
  return longest;
}

std::pair<std::string_view, size_t> SpmNormalizer::NormalizePrefix(std::string_view input) const {
  int32_t id;
  if (const size_t length = user_defined_.LongestPrefix(input, &id); length > 0) {
    return {input.substr(0, length), length};
  }
  if (!trie_units_.empty()) {
    std::string_view replacement;
    if (const size_t length = MatchCharsmap(input, &replacement); length > 0) {
      return {replacement, length};
    }
  }
  size_t length;
  if (!utf8::DecodeFirst(input, &length)) return {utf8::kReplacementChar, 1};
  return {input.substr(0, length), length};
}

std::string SpmNormalizer::Normalize(std::string_view input) const {
  std::string out;
  if (remove_extra_whitespaces_) {
    while (!input.empty()) {
      const auto [unit, consumed] = NormalizePrefix(input);
      if (unit != " ") break;
      input.remove_prefix(consumed);
    }
  }
  if (input.empty()) return out;
  out.reserve(input.size() * 3);
  const std::string_view space = escape_whitespaces_ ? utf8::kSpaceSymbol : " ";
  if (add_dummy_prefix_) out.append(space);

  bool prev_is_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    auto [unit, consumed] = NormalizePrefix(input);
    while (prev_is_space && !unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    if (!unit.empty()) {
      for (const char c : unit) {
        if (c == ' ') {
          out.append(space);
        } else {
          out.push_back(c);
        }
      }
      prev_is_space = unit.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) prev_is_space = false;
  }
  if (remove_extra_whitespaces_) {
    size_t kept = out.size();
    while (std::string_view(out).substr(0, kept).ends_with(space)) kept -= space.size();
    out.erase(kept);
  }
  return out;
}

}  // namespace banyan::text
