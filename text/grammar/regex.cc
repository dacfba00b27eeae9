#include "text/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/grammar/code_points.h"
#include "text/grammar/text_cursor.h"

namespace banyan::text::grammar {
namespace {

// Sorted, disjoint, non-adjacent ranges of code points (code_points.h).
using Ranges = CodePointRanges;

Ranges Normalize(Ranges r) { return NormalizeCodePoints(std::move(r)); }
Ranges Complement(const Ranges& r) { return ComplementCodePoints(r); }

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

class Parser : TextCursor {
 public:
  Parser(std::string_view text, const RegexLimits& limits) : TextCursor(text), limits_(limits) {}

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

  // One UTF-8 encoded code point of the pattern.
  absl::StatusOr<uint32_t> CodePoint() {
    std::optional<uint32_t> cp = DecodeUtf8(text_, &pos_);
    if (!cp.has_value()) return Error("invalid UTF-8");
    return *cp;
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

  const RegexLimits& limits_;
};

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
      AddUtf8Alternatives(lo, hi, &alts);
      continue;
    }
    // Inside a JSON string: controls, '"' and '\' are written as escapes, the rest raw.
    uint32_t from = lo;
    for (uint32_t cp = lo; cp <= hi && cp <= 0x5C; ++cp) {
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        if (from < cp) AddUtf8Alternatives(from, cp - 1, &alts);
        alts.push_back(Literal(JsonEscape(cp)));
        from = cp + 1;
      }
    }
    if (from <= hi) AddUtf8Alternatives(from, hi, &alts);
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
