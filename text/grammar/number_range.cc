#include "text/grammar/number_range.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace banyan::text::grammar {
namespace {

Expr DigitRange(char lo, char hi) {
  return Byte(ByteSet::Range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// The digit strings of one length from x to y (x <= y, same length), digit by digit: the shared
// head, then x's digit followed by anything up to 9...9, the digits strictly between followed by
// anything, and y's digit followed by anything from 0...0.
Expr SameLength(const std::string& x, const std::string& y) {
  if (x.empty()) return Empty();
  // 0...0 to 9...9 is any digits: without this the three-way split grows as 3^length.
  if (x.find_first_not_of('0') == std::string::npos &&
      y.find_first_not_of('9') == std::string::npos) {
    return Repeat(DigitRange('0', '9'), static_cast<int32_t>(x.size()),
                  static_cast<int32_t>(x.size()));
  }
  if (x[0] == y[0]) {
    return Seq({Literal(x.substr(0, 1)), SameLength(x.substr(1), y.substr(1))});
  }
  const size_t rest = x.size() - 1;
  std::vector<Expr> alts;
  alts.push_back(Seq({Literal(x.substr(0, 1)), SameLength(x.substr(1), std::string(rest, '9'))}));
  if (x[0] + 1 <= y[0] - 1) {
    alts.push_back(Seq({DigitRange(static_cast<char>(x[0] + 1), static_cast<char>(y[0] - 1)),
                        Repeat(DigitRange('0', '9'), static_cast<int32_t>(rest),
                               static_cast<int32_t>(rest))}));
  }
  alts.push_back(Seq({Literal(y.substr(0, 1)), SameLength(std::string(rest, '0'), y.substr(1))}));
  return Alt(std::move(alts));
}

int64_t Pow10(int n) {
  int64_t v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

// 0 <= a <= b: the integers a..b without leading zeros.
Expr Unsigned(int64_t a, int64_t b) {
  std::vector<Expr> alts;
  const int la = static_cast<int>(std::to_string(a).size());
  const int lb = static_cast<int>(std::to_string(b).size());
  for (int len = la; len <= lb; ++len) {
    const int64_t lo = std::max(a, len == 1 ? int64_t{0} : Pow10(len - 1));
    const int64_t hi = std::min(b, Pow10(len) - 1);
    if (lo <= hi) alts.push_back(SameLength(std::to_string(lo), std::to_string(hi)));
  }
  return Alt(std::move(alts));
}

}  // namespace

absl::StatusOr<Expr> IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                  int max_digits) {
  if (max_digits < 1 || max_digits > 18) {
    return absl::InvalidArgumentError("integer ranges support 1 to 18 digits");
  }
  const int64_t largest = Pow10(max_digits) - 1;
  const int64_t a = std::max(lo.value_or(-largest), -largest);
  const int64_t b = std::min(hi.value_or(largest), largest);
  if (a > b) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no integer of at most ", max_digits, " digits lies between the bounds (", a, " > ", b,
        ")"));
  }
  std::vector<Expr> alts;
  if (a < 0) {
    // Negative values -b'..-a' for b' = max(1, -b): a minus sign over their magnitudes.
    const int64_t mag_lo = std::max<int64_t>(1, -b);
    const int64_t mag_hi = -a;
    if (mag_lo <= mag_hi) alts.push_back(Seq({Literal("-"), Unsigned(mag_lo, mag_hi)}));
  }
  if (b >= 0) alts.push_back(Unsigned(std::max<int64_t>(0, a), b));
  return Alt(std::move(alts));
}

ByteDfa MultiplesDfa(int64_t k) {
  BANYAN_CHECK(k >= 1 && k <= kMaxMultipleOf) << "multipleOf " << k;
  constexpr int32_t kStart = 0, kMinus = 1, kZero = 2, kRemainder = 3;  // kRemainder + r
  ByteDfa dfa;
  dfa.states.resize(kRemainder + k);
  // Reading digit d after a number with remainder r leaves (10 r + d) mod k.
  auto digits = [&](ByteDfa::State& st, int64_t r, bool leading) {
    for (int d = leading ? 1 : 0; d <= 9; ++d) {
      const int32_t next = kRemainder + static_cast<int32_t>((10 * r + d) % k);
      const uint8_t byte = static_cast<uint8_t>('0' + d);
      if (!st.edges.empty() && st.edges.back().next == next && st.edges.back().hi + 1 == byte) {
        st.edges.back().hi = byte;
      } else {
        st.edges.push_back({byte, byte, next});
      }
    }
  };
  for (int32_t s : {kStart, kMinus}) {
    ByteDfa::State& st = dfa.states[s];
    if (s == kStart) st.edges.push_back({'-', '-', kMinus});
    st.edges.push_back({'0', '0', kZero});
    digits(st, 0, /*leading=*/true);
  }
  dfa.states[kZero].accepting = true;  // "0" and "-0"; nothing follows a leading zero
  for (int64_t r = 0; r < k; ++r) digits(dfa.states[kRemainder + r], r, /*leading=*/false);
  dfa.states[kRemainder].accepting = true;
  return dfa;
}

ByteDfa DecimalMultiplesDfa(int64_t m, int scale) {
  BANYAN_CHECK(m >= 1 && m <= kMaxMultipleOf && scale >= 1 && scale <= kMaxMultipleOfScale)
      << "multipleOf " << m << "e-" << scale;
  // States: start, '-', a leading '0', then per remainder r: the integer part, just after '.',
  // and after fraction digit f = 1..scale.
  constexpr int32_t kStart = 0, kMinus = 1, kZero = 2, kFirst = 3;
  const int64_t row = scale + 2;  // integer, dot, fraction 1..scale
  auto state = [&](int64_t r, int64_t pos) { return static_cast<int32_t>(kFirst + r * row + pos); };
  ByteDfa dfa;
  dfa.states.resize(kFirst + m * row);
  // 10^(scale - f) mod m: what the fraction padded with zeros multiplies the remainder by.
  std::vector<int64_t> pad(scale + 1);
  pad[scale] = 1 % m;
  for (int f = scale - 1; f >= 0; --f) pad[f] = pad[f + 1] * 10 % m;
  auto digits = [&](ByteDfa::State& st, int64_t r, int64_t pos, bool leading) {
    for (int d = leading ? 1 : 0; d <= 9; ++d) {
      const int32_t next = state((10 * r + d) % m, pos);
      const uint8_t byte = static_cast<uint8_t>('0' + d);
      if (!st.edges.empty() && st.edges.back().next == next && st.edges.back().hi + 1 == byte) {
        st.edges.back().hi = byte;
      } else {
        st.edges.push_back({byte, byte, next});
      }
    }
  };
  for (int32_t s : {kStart, kMinus}) {
    ByteDfa::State& st = dfa.states[s];
    if (s == kStart) st.edges.push_back({'-', '-', kMinus});
    st.edges.push_back({'0', '0', kZero});
    digits(st, 0, /*pos=*/0, /*leading=*/true);
  }
  dfa.states[kZero].edges.push_back({'.', '.', state(0, 1)});
  dfa.states[kZero].accepting = true;  // 0, which every k divides
  for (int64_t r = 0; r < m; ++r) {
    ByteDfa::State& whole = dfa.states[state(r, 0)];
    digits(whole, r, 0, false);
    whole.edges.insert(whole.edges.begin(), {'.', '.', state(r, 1)});  // edges sorted: '.' < '0'
    whole.accepting = r * pad[0] % m == 0;
    digits(dfa.states[state(r, 1)], r, 2, false);  // the first fraction digit
    for (int f = 1; f <= scale; ++f) {
      ByteDfa::State& frac = dfa.states[state(r, f + 1)];
      if (f < scale) digits(frac, r, f + 2, false);
      frac.accepting = r * pad[f] % m == 0;
    }
  }
  return dfa;
}

bool ExactDecimal(std::string_view text, int64_t* m, int* scale) {
  size_t i = 0;
  std::string digits;
  int frac = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits += text[i++];
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      digits += text[i++];
      ++frac;
    }
  }
  int64_t exp = 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) neg = text[i++] == '-';
    if (i == text.size()) return false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      exp = exp * 10 + (text[i] - '0');
      if (exp > 1000) return false;
    }
    if (neg) exp = -exp;
  }
  if (i != text.size() || digits.empty()) return false;
  int64_t sc = frac - exp;
  // Trailing zeros: a smaller scale (or a whole number).
  while (!digits.empty() && digits.back() == '0' && sc > 0) {
    digits.pop_back();
    --sc;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return false;  // zero
  digits = digits.substr(first);
  for (; sc < 0; ++sc) digits += '0';
  if (digits.size() > 18) return false;
  *m = std::stoll(digits);
  *scale = static_cast<int>(sc);
  return true;
}

}  // namespace banyan::text::grammar
