// A set of byte values (0..255): the label of a grammar's byte edges.
#ifndef BANYAN_TEXT_GRAMMAR_BYTE_SET_H_
#define BANYAN_TEXT_GRAMMAR_BYTE_SET_H_

#include <array>
#include <cstdint>
#include <string_view>

namespace banyan::text::grammar {

class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet Of(uint8_t b) {
    ByteSet s;
    s.Add(b);
    return s;
  }
  static ByteSet Range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.AddRange(lo, hi);
    return s;
  }
  // Every byte of `chars`.
  static ByteSet Chars(std::string_view chars) {
    ByteSet s;
    for (char c : chars) s.Add(static_cast<uint8_t>(c));
    return s;
  }

  void Add(uint8_t b) { w_[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  void AddAll(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w_[i] |= o.w_[i];
  }
  void Remove(uint8_t b) { w_[b >> 6] &= ~(uint64_t{1} << (b & 63)); }
  bool Contains(uint8_t b) const { return (w_[b >> 6] >> (b & 63)) & 1; }
  bool Empty() const { return (w_[0] | w_[1] | w_[2] | w_[3]) == 0; }
  ByteSet Complement() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w_[i] = ~w_[i];
    return s;
  }
  bool operator==(const ByteSet&) const = default;
  // Calls f(byte) for each byte in the set, in increasing order.
  template <typename F>
  void ForEach(F f) const {
    for (int i = 0; i < 4; ++i) {
      for (uint64_t w = w_[i]; w != 0; w &= w - 1) f(static_cast<uint8_t>(i * 64 + __builtin_ctzll(w)));
    }
  }

 private:
  std::array<uint64_t, 4> w_{};
};

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_BYTE_SET_H_
