#include "text/tokenizer/byte_trie.h"

namespace banyan::text {

void ByteTrie::Insert(std::string_view key, int32_t value) {
  int32_t node = 0;
  for (const char c : key) {
    const uint64_t edge = EdgeKey(node, static_cast<uint8_t>(c));
    const auto it = edges_.find(edge);
    if (it != edges_.end()) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<int32_t>(values_.size());
    values_.push_back(kNoValue);
    edges_.emplace(edge, child);
    node = child;
  }
  if (node != 0) values_[node] = value;
}

size_t ByteTrie::LongestPrefix(std::string_view text, int32_t* value) const {
  size_t longest = 0;
  ForEachPrefix(text, [&](size_t length, int32_t v) {
    longest = length;
    *value = v;
  });
  return longest;
}

}  // namespace banyan::text
