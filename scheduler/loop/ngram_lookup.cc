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

// Calls consider(end) for each end in (lo, hi] with part[end - 1 - offset] == token, from hi
// down, until it returns true; returns whether it did. The comparisons run 16 tokens at a time
// (a block without the token, the common case, is one vectorized test).
template <typename Consider>
bool ScanDown(std::span<const int32_t> part, size_t offset, size_t lo, size_t hi, int32_t token,
              Consider&& consider) {
  constexpr size_t kBlock = 16;
  size_t end = hi;
  while (end > lo) {
    if (end - lo >= kBlock) {
      const int32_t* p = part.data() + (end - kBlock - offset);
      bool any = false;
      for (size_t j = 0; j < kBlock; ++j) any |= p[j] == token;
      if (!any) {
        end -= kBlock;
        continue;
      }
    }
    const size_t stop = end - lo >= kBlock ? end - kBlock : lo;
    for (; end > stop; --end) {
      if (part[end - 1 - offset] == token && consider(end)) return true;
    }
  }
  return false;
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
  // Ends run over [min_n, size - 1]: those in the tail's part first, then the head's.
  const size_t lo = static_cast<size_t>(lookup.min_n) - 1;
  const size_t head = context.head.size();
  if (size - 1 > std::max(head, lo) &&
      ScanDown(context.tail, head, std::max(head, lo), size - 1, last, consider)) {
    return best;
  }
  if (std::min(size - 1, head) > lo &&
      ScanDown(context.head, 0, lo, std::min(size - 1, head), last, consider)) {
    return best;
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
  // Past the context's end the drafts go on with themselves: a match ending p tokens before the
  // end says the text repeats with period p (a loop, a list, a table's rows), and a budget
  // longer than p continues the period.
  const size_t size = context.size();
  for (size_t i = m.end; drafts.size() < static_cast<size_t>(budget); ++i) {
    drafts.push_back(i < size ? context[i] : drafts[i - size]);
  }
  return drafts;
}

}  // namespace banyan::scheduler
