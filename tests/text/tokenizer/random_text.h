// Test helpers: seeds, random text that exercises tokenizers, and a strict UTF-8 check.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace banyan::text::testing {

// A fresh seed per run, or BANYAN_TEST_SEED to replay one that failed.
inline uint64_t TestSeed() {
  if (const char* s = std::getenv("BANYAN_TEST_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Strict UTF-8 (shortest form, no surrogates, at most U+10FFFF).
inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    int n;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      const auto t = static_cast<uint8_t>(s[i + k]);
      if ((t & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (t & 0x3F);
    }
    const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
    i += n;
  }
  return true;
}

struct RandomTextOptions {
  bool invalid_bytes = true;             // raw bytes that are not valid UTF-8
  std::vector<std::string> extra_words;  // e.g. a model's user-defined pieces
};

// Text of 0..40 fragments: words (common English, accented, CJK, emoji, NFKC-foldable forms),
// whitespace runs (spaces, tabs, newlines, CR, NBSP, ideographic space), digits, punctuation,
// random code points from several planes, control characters and, optionally, invalid bytes.
inline std::string RandomText(std::mt19937_64& rng, const RandomTextOptions& options = {}) {
  static const std::vector<std::string> kWords = {
      "Once",    "upon",       "a",      "time",     "there",
      "was",     "little",     "girl",   "named",    "Lily",
      "She",     "liked",      "to",     "play",     "with",
      "her",     "ball",       "in",     "the",      "park",
      "happy",   "dog",        "said",   "Tom",      "big",
      "tree",    "sun",        "and",    "they",     "were",
      "friends", "Hello",      "world",  "THE",      "naïve",
      "café",    "façade",     "Straße", "über",     "niño",
      "résumé",  "Ærøskøbing", "Ελλάδα", "привет",   "日本語",
      "中文",    "東京",       "한국어", "ไทย",      "עברית",
      "مرحبا",   "हिन्दी",      "🙂",   "👍🏽", "👩‍👩‍👧",
      "🇫🇷",      "e\u0301",    "ﬁ",      "Ａｂｃ",   "①",
      "㍻",      "™",          "…",      "½",        "\uFFFD",
      "x²"};
  static const std::vector<std::string> kSpaces = {
      " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", " \t ", "\u00A0", "\u3000", "\u2009"};
  static const std::vector<std::string> kPunct = {
      ".",    ",",     "!", "?",      "'", "\"", "(", ")", "-", ":",  ";", "<s>",
      "</s>", "<unk>", "▁", "<0x41>", "#", "$",  "%", "&", "@", "\\", "/", "_"};
  static const std::vector<std::string> kInvalid = {
      "\x80",         "\xBF",     "\xC3",         "\xE6\x97",
      "\xF0\x9F\x99", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
      "\xFE",         "\xFF"};
  std::string text;
  const int fragments = std::uniform_int_distribution<int>(0, 40)(rng);
  const auto pick = [&rng](const std::vector<std::string>& pool) -> const std::string& {
    return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
  };
  for (int f = 0; f < fragments; ++f) {
    const int kind = std::uniform_int_distribution<int>(0, 99)(rng);
    if (kind < 35) {
      text += pick(kWords);
    } else if (kind < 60) {
      text += pick(kSpaces);
    } else if (kind < 67) {
      text += std::to_string(std::uniform_int_distribution<int>(0, 99999)(rng));
    } else if (kind < 75) {
      text += pick(kPunct);
    } else if (kind < 85) {
      static const uint32_t kRanges[][2] = {
          {0x20, 0x7E},       {0xA0, 0x24F},      {0x370, 0x52F},   {0x3040, 0x30FF},
          {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xE000, 0xF8FF}, {0xFF00, 0xFFEF},
          {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
      const auto& r = kRanges[std::uniform_int_distribution<int>(0, 9)(rng)];
      AppendCodePoint(std::uniform_int_distribution<uint32_t>(r[0], r[1])(rng), &text);
    } else if (kind < 90) {
      text.push_back(static_cast<char>(std::uniform_int_distribution<int>(0, 0x1F)(rng)));
    } else if (kind < 95 && !options.extra_words.empty()) {
      text += pick(options.extra_words);
    } else if (options.invalid_bytes) {
      text += pick(kInvalid);
    } else {
      text += pick(kWords);
    }
  }
  return text;
}

}  // namespace banyan::text::testing
