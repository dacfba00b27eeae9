#include "scheduler/loop/ngram_lookup.h"

#include <algorithm>

namespace banyan::scheduler {

namespace {

// How many tokens, up to `limit`, the occurrence ending at `end` (exclusive) shares with the
// context's suffix, counted backwards; its last token is known to match.
int MatchLength(const TokenContext& c, size_t end, int limit) {
  const size_t last = c.size() - 1;
  int n = 1;
  while (n < limit && static_cast<size_t>(n) < end && c[end - 1 - n] == c[last - n]) ++n;
  return n;
}

}  // namespace

NgramMatch FindNgram(const TokenContext& context, const NgramLookup& lookup) {
  NgramMatch best;
  const size_t size = context.size();
  if (!lookup.enabled() || lookup.min_n < 1 || lookup.max_n < lookup.min_n ||
      size < static_cast<size_t>(lookup.min_n) + 1) {
    return best;
  }
  const int32_t last = context[size - 1];
  // Occurrences end at `end` <= size - 1 (the suffix itself ends at size), newest first. The
  // comparisons of the last token run over each part's contiguous tokens.
  auto consider = [&](size_t end) {
    const int n = MatchLength(context, end, lookup.max_n);
    if (n > best.n) best = {.end = end, .n = n};
    return n == lookup.max_n;  // nothing older can beat it
  };
  const size_t min_end = static_cast<size_t>(lookup.min_n);
  const size_t head = context.head.size();
  for (size_t end = size - 1; end > head && end >= min_end; --end) {
    if (context.tail[end - 1 - head] == last && consider(end)) return best;
  }
  for (size_t end = std::min(size - 1, head); end >= min_end; --end) {
    if (context.head[end - 1] == last && consider(end)) return best;
  }
  if (best.n < lookup.min_n) best = {};
  return best;
}

std::vector<int32_t> NgramDrafts(const TokenContext& context, const NgramLookup& lookup,
                                 int budget) {
  std::vector<int32_t> drafts;
  if (budget <= 0) return drafts;
  const NgramMatch m = FindNgram(context, lookup);
  if (m.n == 0) return drafts;
  const size_t stop = std::min(context.size(), m.end + static_cast<size_t>(budget));
  for (size_t i = m.end; i < stop; ++i) drafts.push_back(context[i]);
  return drafts;
}

}  // namespace banyan::scheduler
