// UTF-8 helpers with exactly sentencepiece's notion of validity, which both the normalizer (bad
// input bytes become U+FFFD) and the decoder (byte pieces that do not form a character become
// U+FFFD) depend on. A sequence is valid when it is the shortest encoding of a code point in
// [0, 0xD800) or [0xE000, 0x10FFFF]; anything else is invalid and consumes exactly one byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace banyan::utf8 {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";      // U+2581 "▁"

inline bool IsTrailByte(uint8_t b) { return (b & 0xC0) == 0x80; }

// Length of the sequence that lead byte `b` announces: 1 for ASCII and for bytes that cannot
// start a sequence (they are invalid on their own), else 2..4.
inline int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// sentencepiece's OneCharLen: how far a splitter advances from lead byte `b`, valid or not.
inline int OneCharLen(uint8_t b) {
  static constexpr int kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[b >> 4];
}

// Decodes the character at the start of `s` (non-empty). Sets *length to the bytes it spans
// (1 when invalid) and returns whether it is valid. A literal U+FFFD in the input is valid.
inline bool DecodeFirst(std::string_view s, size_t* length) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  *length = 1;
  if (b0 < 0x80) return true;
  const int n = SequenceLength(b0);
  if (n == 1 || s.size() < static_cast<size_t>(n)) return false;
  uint32_t cp = b0 & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (!IsTrailByte(b)) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  const bool valid_cp = cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF);
  if (cp < kMinForLength[n] || !valid_cp) return false;
  *length = static_cast<size_t>(n);
  return true;
}

// Appends the text of `bytes`, the bytes of consecutive byte pieces, to *out the way
// sentencepiece decodes such a run: each valid character verbatim, and U+FFFD for each byte
// that starts no valid character. With `complete` false the run may continue, so decoding stops
// before a trailing partial sequence that more bytes could still complete. Returns the number of
// bytes consumed; the rest must be passed again, with the bytes that follow them.
inline size_t AppendByteRun(std::string_view bytes, bool complete, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string_view rest = bytes.substr(pos);
    const auto needed = static_cast<size_t>(SequenceLength(static_cast<uint8_t>(rest[0])));
    if (!complete && rest.size() < needed) {
      bool may_complete = true;
      for (size_t i = 1; i < rest.size(); ++i) {
        may_complete = may_complete && IsTrailByte(static_cast<uint8_t>(rest[i]));
      }
      if (may_complete) break;
    }
    size_t length;
    if (DecodeFirst(rest, &length)) {
      out->append(rest.substr(0, length));
    } else {
      out->append(kReplacementChar);
    }
    pos += length;
  }
  return pos;
}

}  // namespace banyan::utf8
