// ByteTrie: a map from byte strings to int32 values that answers "which keys are prefixes of
// this text", in order of increasing length. Used for vocabulary lookup in the unigram Viterbi
// pass and for matching user-defined symbols.
//
// Nodes are numbered from 0 (the root); edges live in one hash map keyed by (node, byte), so the
// trie costs about one hash entry per distinct key prefix. Not thread-safe to mutate; const
// methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace banyan::text {

class ByteTrie {
 public:
  ByteTrie() : values_(1, kNoValue) {}

  // Maps `key` (non-empty) to `value` (>= 0), replacing any earlier value.
  void Insert(std::string_view key, int32_t value);

  bool empty() const { return values_.size() == 1; }

  // Calls f(length, value) for every key that is a prefix of `text`, shortest first.
  template <typename F>
  void ForEachPrefix(std::string_view text, F&& f) const {
    int32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) return;
      if (values_[node] != kNoValue) f(i + 1, values_[node]);
    }
  }

  // Length of the longest key that is a prefix of `text` (0 when none); its value in *value.
  size_t LongestPrefix(std::string_view text, int32_t* value) const;

 private:
  static constexpr int32_t kNoValue = -1;

  static uint64_t EdgeKey(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  int32_t Child(int32_t node, uint8_t byte) const {
    const auto it = edges_.find(EdgeKey(node, byte));
    return it == edges_.end() ? -1 : it->second;
  }

  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node, byte) -> child node
  std::vector<int32_t> values_;                   // per node: the key's value or kNoValue
};

}  // namespace banyan::text
