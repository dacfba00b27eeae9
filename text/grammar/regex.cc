#include "text/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan::text::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent ranges of code points (surrogates included only where the
// pattern names them; they are dropped when encoding).
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Ranges Digits() { return {{'0', '9'}}; }
Ranges Word() { return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
Ranges Space() {
  return Normalize({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}
Ranges LineTerminators() { return Normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

struct Node {
  enum class Kind { kEmpty, kSet, kSeq, kAlt, kRepeat, kStart, kEnd };
  Kind kind = Kind::kEmpty;
  Ranges set;
  int min = 0, max = -1;
  std::vector<Node> kids;
};

Node SetNode(Ranges r) {
  Node n;
  n.kind = Node::Kind::kSet;
  n.set = Normalize(std::move(r));
  return n;
}

class Parser {
 public:
  Parser(std::string_view text, const RegexLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<Node> Parse() {
    absl::StatusOr<Node> n = Alternation(0);
    if (!n.ok()) return n;
    if (pos_ < text_.size()) return Error("an unmatched ')'");
    return n;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regular expression: ", what, " at offset ", pos_));
  }
  bool More() const { return pos_ < text_.size(); }
  char Peek() const { return text_[pos_]; }
  bool Eat(char c) {
    if (More() && Peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // One UTF-8 encoded code point of the pattern.
  absl::StatusOr<uint32_t> CodePoint() {
    const auto b0 = static_cast<uint8_t>(text_[pos_]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(text_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return Error("invalid UTF-8");
    }
    pos_ += len;
    return cp;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (!More() || !std::isxdigit(static_cast<unsigned char>(Peek()))) {
        return Error("a malformed hexadecimal escape");
      }
      const char c = text_[pos_++];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: a class escape (\d ...) as ranges, or one code point.
  absl::StatusOr<Ranges> Escape(bool in_class) {
    if (!More()) return Error("a pattern ending in '\\'");
    const char c = text_[pos_++];
    switch (c) {
      case 'd': return Digits();
      case 'D': return Complement(Digits());
      case 'w': return Word();
      case 'W': return Complement(Word());
      case 's': return Space();
      case 'S': return Complement(Space());
      case 't': return Ranges{{'\t', '\t'}};
      case 'n': return Ranges{{'\n', '\n'}};
      case 'r': return Ranges{{'\r', '\r'}};
      case 'f': return Ranges{{'\f', '\f'}};
      case 'v': return Ranges{{'\v', '\v'}};
      case '0':
        if (More() && std::isdigit(static_cast<unsigned char>(Peek()))) {
          return Error("an octal escape (not supported)");
        }
        return Ranges{{0, 0}};
      case 'x': {
        absl::StatusOr<uint32_t> v = Hex(2);
        if (!v.ok()) return v.status();
        return Ranges{{*v, *v}};
      }
      case 'u': {
        uint32_t v;
        if (Eat('{')) {
          v = 0;
          int n = 0;
          while (More() && Peek() != '}' && n < 7) {
            absl::StatusOr<uint32_t> d = Hex(1);
            if (!d.ok()) return d.status();
            v = v * 16 + *d;
            ++n;
          }
          if (!Eat('}') || n == 0 || v > kMaxCodePoint) return Error("a malformed \\u{...}");
        } else {
          absl::StatusOr<uint32_t> h = Hex(4);
          if (!h.ok()) return h.status();
          v = *h;
        }
        return Ranges{{v, v}};
      }
      case 'b':
        if (in_class) return Ranges{{'\b', '\b'}};
        --pos_;
        return Error("a word boundary \\b (not a regular language here; not supported)");
      case 'B':
        --pos_;
        return Error("\\B (not supported)");
      case 'p':
      case 'P':
        --pos_;
        return Error("a Unicode property escape (not supported)");
      case 'k':
        --pos_;
        return Error("a named backreference (not a regular language)");
      case 'c':
        --pos_;
        return Error("a control escape \\c (not supported)");
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          return Error("a backreference (not a regular language)");
        }
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --pos_;
          return Error(absl::StrCat("an unknown escape '\\", std::string(1, c), "'"));
        }
        --pos_;
        absl::StatusOr<uint32_t> cp = CodePoint();
        if (!cp.ok()) return cp.status();
        return Ranges{{*cp, *cp}};
    }
  }

  absl::StatusOr<Node> Class() {
    const bool negate = Eat('^');
    Ranges set;
    bool first = true;
    while (More() && (Peek() != ']' || first)) {
      first = false;
      absl::StatusOr<Ranges> lo = ClassAtom();
      if (!lo.ok()) return lo.status();
      if (More() && Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<Ranges> hi = ClassAtom();
        if (!hi.ok()) return hi.status();
        if (lo->size() != 1 || hi->size() != 1 || (*lo)[0].first != (*lo)[0].second ||
            (*hi)[0].first != (*hi)[0].second) {
          return Error("a class range with a class escape as an end");
        }
        if ((*lo)[0].first > (*hi)[0].first) return Error("a class range out of order");
        set.emplace_back((*lo)[0].first, (*hi)[0].first);
      } else {
        set.insert(set.end(), lo->begin(), lo->end());
      }
    }
    if (!Eat(']')) return Error("an unterminated '['");
    Ranges r = Normalize(std::move(set));
    return SetNode(negate ? Complement(r) : r);
  }

  absl::StatusOr<Ranges> ClassAtom() {
    if (Eat('\\')) return Escape(/*in_class=*/true);
    absl::StatusOr<uint32_t> cp = CodePoint();
    if (!cp.ok()) return cp.status();
    return Ranges{{*cp, *cp}};
  }

  absl::StatusOr<int> Number() {
    if (!More() || !std::isdigit(static_cast<unsigned char>(Peek()))) {
      return Error("a malformed {n,m}");
    }
    int64_t v = 0;
    while (More() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > limits_.max_repeat) {
        return Error(absl::StrCat("a repetition count over ", limits_.max_repeat));
      }
    }
    return static_cast<int>(v);
  }

  absl::StatusOr<Node> Atom(int depth) {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (depth + 1 > limits_.max_depth) {
        return Error(absl::StrCat("groups nested more than ", limits_.max_depth, " deep"));
      }
      if (Eat('?')) {
        if (Eat(':')) {
        } else if (More() && Peek() == '<' && pos_ + 1 < text_.size() &&
                   text_[pos_ + 1] != '=' && text_[pos_ + 1] != '!') {
          const size_t close = text_.find('>', pos_);
          if (close == std::string_view::npos) return Error("an unterminated group name");
          pos_ = close + 1;
        } else {
          return Error("a lookaround or other (?...) group (not supported)");
        }
      }
      absl::StatusOr<Node> inner = Alternation(depth + 1);
      if (!inner.ok()) return inner;
      if (!Eat(')')) return Error("an unterminated '('");
      return inner;
    }
    if (c == '[') {
      ++pos_;
      return Class();
    }
    if (c == '.') {
      ++pos_;
      return SetNode(Complement(LineTerminators()));
    }
    if (c == '^' || c == '$') {
      ++pos_;
      Node n;
      n.kind = c == '^' ? Node::Kind::kStart : Node::Kind::kEnd;
      return n;
    }
    if (c == '\\') {
      ++pos_;
      absl::StatusOr<Ranges> r = Escape(/*in_class=*/false);
      if (!r.ok()) return r.status();
      return SetNode(*std::move(r));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("a quantifier with nothing to repeat");
    if (c == ')') return Error("an unmatched ')'");
    absl::StatusOr<uint32_t> cp = CodePoint();
    if (!cp.ok()) return cp.status();
    return SetNode({{*cp, *cp}});
  }

  absl::StatusOr<Node> Concatenation(int depth) {
    Node seq;
    seq.kind = Node::Kind::kSeq;
    while (More() && Peek() != '|' && Peek() != ')') {
      absl::StatusOr<Node> atom = Atom(depth);
      if (!atom.ok()) return atom;
      int min = 1, max = 1;
      bool quantified = true;
      if (Eat('*')) {
        min = 0, max = -1;
      } else if (Eat('+')) {
        min = 1, max = -1;
      } else if (Eat('?')) {
        min = 0, max = 1;
      } else if (More() && Peek() == '{') {
        ++pos_;
        absl::StatusOr<int> lo = Number();
        if (!lo.ok()) return lo.status();
        min = max = *lo;
        if (Eat(',')) {
          if (More() && Peek() == '}') {
            max = -1;
          } else {
            absl::StatusOr<int> hi = Number();
            if (!hi.ok()) return hi.status();
            max = *hi;
            if (max < min) return Error("{n,m} with m < n");
          }
        }
        if (!Eat('}')) return Error("a malformed {n,m}");
      } else {
        quantified = false;
      }
      if (quantified) {
        Eat('?');  // lazy: the same language
        if (atom->kind == Node::Kind::kStart || atom->kind == Node::Kind::kEnd) {
          return Error("a quantified anchor");
        }
        Node rep;
        rep.kind = Node::Kind::kRepeat;
        rep.min = min;
        rep.max = max;
        rep.kids.push_back(*std::move(atom));
        seq.kids.push_back(std::move(rep));
      } else {
        seq.kids.push_back(*std::move(atom));
      }
    }
    return seq;
  }

  absl::StatusOr<Node> Alternation(int depth) {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    while (true) {
      absl::StatusOr<Node> branch = Concatenation(depth);
      if (!branch.ok()) return branch;
      alt.kids.push_back(*std::move(branch));
      if (!Eat('|')) break;
    }
    return alt;
  }

  std::string_view text_;
  const RegexLimits& limits_;
  size_t pos_ = 0;
};

// ---- Encoding code point ranges as byte expressions ----

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

void AddUtf8Range(uint32_t lo, uint32_t hi, std::vector<Expr>* alts) {
  const std::pair<uint32_t, uint32_t> buckets[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCodePoint}};
  for (const auto& [blo, bhi] : buckets) {
    const uint32_t l = std::max(lo, blo), h = std::min(hi, bhi);
    if (l <= h) SplitSameLength(l, h, alts);
  }
}

// How JSON writes a code point that must be escaped inside a string.
std::string JsonEscape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: {
      static const char kHex[] = "0123456789abcdef";
      return absl::StrCat("\\u00", std::string(1, kHex[cp >> 4]), std::string(1, kHex[cp & 15]));
    }
  }
}

Expr EncodeSet(const Ranges& set, RegexText text) {
  std::vector<Expr> alts;
  for (const auto& [lo, hi] : set) {
    if (text == RegexText::kUtf8) {
      AddUtf8Range(lo, hi, &alts);
      continue;
    }
    // Inside a JSON string: controls, '"' and '\' are written as escapes, the rest raw.
    uint32_t from = lo;
    for (uint32_t cp = lo; cp <= hi && cp <= 0x5C; ++cp) {
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        if (from < cp) AddUtf8Range(from, cp - 1, &alts);
        alts.push_back(Literal(JsonEscape(cp)));
        from = cp + 1;
      }
    }
    if (from <= hi) AddUtf8Range(from, hi, &alts);
  }
  if (alts.empty()) return Byte(ByteSet());  // matches nothing
  return Alt(std::move(alts));
}

Expr ToExpr(const Node& n, RegexText text) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
    case Node::Kind::kStart:
    case Node::Kind::kEnd:
      return Empty();
    case Node::Kind::kSet:
      return EncodeSet(n.set, text);
    case Node::Kind::kSeq: {
      std::vector<Expr> kids;
      for (const Node& k : n.kids) kids.push_back(ToExpr(k, text));
      return Seq(std::move(kids));
    }
    case Node::Kind::kAlt: {
      std::vector<Expr> kids;
      for (const Node& k : n.kids) kids.push_back(ToExpr(k, text));
      return Alt(std::move(kids));
    }
    case Node::Kind::kRepeat:
      return Repeat(ToExpr(n.kids[0], text), n.min, n.max);
  }
  return Empty();
}

// Anchors are allowed only as the first / last item of a top-level alternative.
bool AnchorsMisplaced(const Node& n, bool top_level) {
  if (n.kind == Node::Kind::kStart || n.kind == Node::Kind::kEnd) return !top_level;
  for (const Node& k : n.kids) {
    if (AnchorsMisplaced(k, false)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Expr> RegexToExpr(std::string_view pattern, RegexMatch match, RegexText text,
                                 const RegexLimits& limits) {
  if (pattern.size() > static_cast<size_t>(limits.max_length)) {
    return absl::InvalidArgumentError(absl::StrCat("regular expression: longer than ",
                                                   limits.max_length, " bytes"));
  }
  Parser parser(pattern, limits);
  absl::StatusOr<Node> root = parser.Parse();
  if (!root.ok()) return root.status();
  // In a search, any text (line terminators too) may come before and after the match.
  const Expr any = Star(EncodeSet({{0, kMaxCodePoint}}, text));
  std::vector<Expr> branches;
  for (Node& branch : root->kids) {  // root is an alternation of sequences
    bool starts = false, ends = false;
    std::vector<Node>& items = branch.kids;
    if (!items.empty() && items.front().kind == Node::Kind::kStart) {
      starts = true;
      items.erase(items.begin());
    }
    if (!items.empty() && items.back().kind == Node::Kind::kEnd) {
      ends = true;
      items.pop_back();
    }
    for (const Node& item : items) {
      if (AnchorsMisplaced(item, false)) {
        return absl::InvalidArgumentError(
            "regular expression: '^' or '$' inside the pattern (only at the start or end of an "
            "alternative is supported)");
      }
    }
    Expr body = ToExpr(branch, text);
    if (match == RegexMatch::kSearch) {
      std::vector<Expr> parts;
      if (!starts) parts.push_back(any);
      parts.push_back(std::move(body));
      if (!ends) parts.push_back(any);
      body = Seq(std::move(parts));
    }
    branches.push_back(std::move(body));
  }
  return Alt(std::move(branches));
}

}  // namespace banyan::text::grammar
