#include "text/grammar/code_points.h"

#include <algorithm>

namespace banyan::text::grammar {
namespace {

// Code points lo..hi, all encoded in the same number of bytes, as byte-range sequences: split
// until every byte position ranges independently (the trailing bytes over whole 0x80..0xBF).
void SplitSameLength(uint32_t lo, uint32_t hi, std::vector<Expr>* alts) {
  if (lo > hi) return;
  std::string a, b;
  AppendUtf8(lo, &a);
  const size_t n = a.size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, alts);
        SplitSameLength((lo | m) + 1, hi, alts);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, alts);
        SplitSameLength(hi & ~m, hi, alts);
        return;
      }
    }
  }
  AppendUtf8(hi, &b);
  std::vector<Expr> bytes;
  for (size_t i = 0; i < n; ++i) {
    bytes.push_back(Byte(ByteSet::Range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]))));
  }
  alts->push_back(Seq(std::move(bytes)));
}

}  // namespace

CodePointRanges NormalizeCodePoints(CodePointRanges r) {
  std::sort(r.begin(), r.end());
  CodePointRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodePointRanges ComplementCodePoints(const CodePointRanges& r) {
  CodePointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

std::optional<uint32_t> DecodeUtf8(std::string_view text, size_t* pos) {
  if (*pos >= text.size()) return std::nullopt;
  const auto b0 = static_cast<uint8_t>(text[*pos]);
  const int len =
      b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || *pos + len > text.size()) return std::nullopt;
  uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[*pos + i]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return std::nullopt;
  }
  *pos += len;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void AddUtf8Alternatives(uint32_t lo, uint32_t hi, std::vector<Expr>* alts) {
  // Split by encoded length, the surrogates left out.
  const std::pair<uint32_t, uint32_t> buckets[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCodePoint}};
  for (const auto& [blo, bhi] : buckets) {
    const uint32_t l = std::max(lo, blo), h = std::min(hi, bhi);
    if (l <= h) SplitSameLength(l, h, alts);
  }
}

Expr Utf8Set(const CodePointRanges& set) {
  std::vector<Expr> alts;
  for (const auto& [lo, hi] : set) AddUtf8Alternatives(lo, hi, &alts);
  if (alts.empty()) return Byte(ByteSet());  // matches nothing
  return Alt(std::move(alts));
}

}  // namespace banyan::text::grammar
