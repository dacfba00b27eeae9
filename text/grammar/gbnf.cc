#include "text/grammar/gbnf.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/grammar/code_points.h"
#include "text/grammar/text_cursor.h"

namespace banyan::text::grammar {
namespace {

// A rule's inlined body larger than this (in expression nodes) stays a rule of its own, called:
// inlining it at every use could grow the grammar exponentially (r1 ::= r0 r0, r2 ::= r1 r1...).
constexpr int64_t kMaxInlineNodes = 2000;

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; }

class Parser : TextCursor {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : TextCursor(text), limits_(limits) {}

  // The rules as written (every reference a kRef), in order of first mention.
  absl::StatusOr<Grammar> Parse() {
    SkipSpace(/*newlines=*/true);
    while (More()) {
      if (absl::Status s = Rule(); !s.ok()) return s;
      SkipSpace(/*newlines=*/true);
    }
    if (g_.num_rules() == 0) return absl::InvalidArgumentError("GBNF: the grammar has no rules");
    for (int32_t r = 0; r < g_.num_rules(); ++r) {
      if (!g_.defined(r)) {
        return ErrorAt(first_use_[r], absl::StrCat("rule '", g_.name(r), "' is not defined"));
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) {
      return absl::InvalidArgumentError("GBNF: the grammar defines no 'root' rule (the start)");
    }
    g_.set_root(root->second);
    return std::move(g_);
  }

 private:
  absl::Status ErrorAt(size_t pos, const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      const auto b = static_cast<uint8_t>(text_[i]);
      if (b == '\n') {
        ++line;
        column = 1;
      } else if ((b & 0xC0) != 0x80) {  // a continuation byte is no new column
        ++column;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("GBNF: ", what, " at line ", line, ", column ", column));
  }
  absl::Status Error(const std::string& what) const { return ErrorAt(pos_, what); }
  // The character at pos_, quoted for a message.
  std::string Here() const {
    if (!More()) return "the end of the grammar";
    size_t p = pos_;
    if (!DecodeUtf8(text_, &p).has_value()) return "a byte that is not UTF-8";
    return absl::StrCat("'", std::string(text_.substr(pos_, p - pos_)), "'");
  }


  // Blanks and comments; newlines too where a rule continues over them.
  void SkipSpace(bool newlines) {
    while (More()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (More() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string_view Name() {
    const size_t start = pos_;
    while (More() && IsNameChar(Peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // The rule's index, declared on first mention.
  absl::StatusOr<int32_t> Id(std::string_view name, size_t pos) {
    auto [it, added] = ids_.try_emplace(std::string(name), g_.num_rules());
    if (added) {
      if (g_.num_rules() >= limits_.max_rules) {
        return ErrorAt(pos, absl::StrCat("more than ", limits_.max_rules, " rules"));
      }
      g_.AddRule(std::string(name));
      first_use_.push_back(pos);
      defined_at_.push_back(std::nullopt);
    }
    return it->second;
  }

  absl::Status Rule() {
    const size_t start = pos_;
    const std::string_view name = Name();
    if (name.empty()) return Error(absl::StrCat("expected a rule name, found ", Here()));
    absl::StatusOr<int32_t> id = Id(name, start);
    if (!id.ok()) return id.status();
    if (defined_at_[*id].has_value()) {
      return ErrorAt(start, absl::StrCat("rule '", std::string(name), "' is defined twice"));
    }
    defined_at_[*id] = start;
    SkipSpace(/*newlines=*/false);
    if (text_.substr(pos_, 3) != "::=") {
      return Error(absl::StrCat("expected '::=' after the rule name '", std::string(name),
                                 "', found ", Here()));
    }
    pos_ += 3;
    SkipSpace(/*newlines=*/true);
    absl::StatusOr<Expr> body = Alternatives(/*depth=*/0, /*nested=*/false);
    if (!body.ok()) return body.status();
    if (More() && Peek() != '\n' && Peek() != '\r') {
      if (Peek() == ')') return Error("an unmatched ')'");
      return Error(absl::StrCat("unexpected ", Here()));
    }
    g_.SetBody(*id, *std::move(body));
    return absl::OkStatus();
  }

  absl::StatusOr<Expr> Alternatives(int depth, bool nested) {
    std::vector<Expr> alts;
    while (true) {
      absl::StatusOr<Expr> seq = Sequence(depth, nested);
      if (!seq.ok()) return seq;
      alts.push_back(*std::move(seq));
      if (!Eat('|')) break;
      SkipSpace(/*newlines=*/true);
    }
    return Alt(std::move(alts));
  }

  absl::StatusOr<Expr> Sequence(int depth, bool nested) {
    std::vector<Expr> items;
    while (More() && Peek() != '|' && Peek() != ')' && Peek() != '\n' && Peek() != '\r') {
      absl::StatusOr<Expr> item = Item(depth);
      if (!item.ok()) return item;
      SkipSpace(nested);
      while (More() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
        absl::StatusOr<Expr> repeated = Repetition(*std::move(item), nested);
        if (!repeated.ok()) return repeated;
        item = *std::move(repeated);
        SkipSpace(nested);
      }
      items.push_back(*std::move(item));
    }
    return Seq(std::move(items));
  }

  absl::StatusOr<Expr> Item(int depth) {
    const size_t start = pos_;
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      return Literal(start);
    }
    if (c == '[') {
      ++pos_;
      return Class(start);
    }
    if (c == '.') {
      ++pos_;
      return Utf8Char(ByteSet());
    }
    if (c == '(') {
      ++pos_;
      if (depth + 1 > limits_.max_depth) {
        return ErrorAt(start, absl::StrCat("groups nested more than ", limits_.max_depth, " deep"));
      }
      SkipSpace(/*newlines=*/true);
      absl::StatusOr<Expr> inner = Alternatives(depth + 1, /*nested=*/true);
      if (!inner.ok()) return inner;
      if (!Eat(')')) return ErrorAt(start, "an unterminated '('");
      return inner;
    }
    if (IsNameChar(c)) {
      absl::StatusOr<int32_t> id = Id(Name(), start);
      if (!id.ok()) return id.status();
      return Ref(*id);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      return Error(absl::StrCat("a repetition '", std::string(1, c), "' with nothing to repeat"));
    }
    if (c == '<') return Error("a token reference '<...>' (not supported)");
    return Error(absl::StrCat("unexpected ", Here()));
  }

  absl::StatusOr<int> Number() {
    if (!More() || !std::isdigit(static_cast<unsigned char>(Peek()))) {
      return Error(absl::StrCat("expected a number in {m,n}, found ", Here()));
    }
    int64_t v = 0;
    const size_t start = pos_;
    while (More() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > limits_.max_repeat) {
        return ErrorAt(start, absl::StrCat("a repetition count over ", limits_.max_repeat));
      }
    }
    return static_cast<int>(v);
  }

  absl::StatusOr<Expr> Repetition(Expr item, bool nested) {
    const size_t start = pos_;
    const char c = text_[pos_++];
    if (c == '*') return Star(std::move(item));
    if (c == '+') return Plus(std::move(item));
    if (c == '?') return Opt(std::move(item));
    SkipSpace(nested);
    absl::StatusOr<int> min = Number();
    if (!min.ok()) return min.status();
    int max = *min;
    SkipSpace(nested);
    if (Eat(',')) {
      SkipSpace(nested);
      if (More() && Peek() == '}') {
        max = -1;
      } else {
        absl::StatusOr<int> hi = Number();
        if (!hi.ok()) return hi.status();
        max = *hi;
        SkipSpace(nested);
      }
    }
    if (!Eat('}')) return ErrorAt(start, "an unterminated '{'");
    if (max >= 0 && max < *min) {
      return ErrorAt(start, absl::StrCat("a repetition {", *min, ",", max, "} with n < m"));
    }
    return Repeat(std::move(item), *min, max);
  }

  absl::StatusOr<uint32_t> Hex(size_t escape_start, int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (!More() || !std::isxdigit(static_cast<unsigned char>(Peek()))) {
        return ErrorAt(escape_start, absl::StrCat("a bad escape: '\\",
                                                  std::string(1, text_[escape_start + 1]),
                                                  "' needs ", digits, " hexadecimal digits"));
      }
      const char h = text_[pos_++];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
      return ErrorAt(escape_start, "a bad escape: not a Unicode scalar value");
    }
    return v;
  }

  // One code point of a literal or class, escaped or not; `what` names the construct (opened at
  // `open`) for an error at the end of the text.
  absl::StatusOr<uint32_t> Char(size_t open, const char* what) {
    if (!More()) return ErrorAt(open, absl::StrCat("an unterminated ", what));
    const size_t start = pos_;
    if (Eat('\\')) {
      if (!More()) return ErrorAt(open, absl::StrCat("an unterminated ", what));
      const char e = text_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          return static_cast<uint32_t>(e);
        case 'x': return Hex(start, 2);
        case 'u': return Hex(start, 4);
        case 'U': return Hex(start, 8);
        default: {
          pos_ = start + 1;
          return ErrorAt(start, absl::StrCat("a bad escape '\\", Here().substr(1)));
        }
      }
    }
    std::optional<uint32_t> cp = DecodeUtf8(text_, &pos_);
    if (!cp.has_value()) return Error("a byte that is not UTF-8");
    return *cp;
  }

  absl::StatusOr<Expr> Literal(size_t open) {
    std::string bytes;
    while (true) {
      if (!More()) return ErrorAt(open, "an unterminated string literal");
      if (Eat('"')) break;
      absl::StatusOr<uint32_t> cp = Char(open, "string literal");
      if (!cp.ok()) return cp.status();
      AppendUtf8(*cp, &bytes);
    }
    return grammar::Literal(bytes);
  }

  absl::StatusOr<Expr> Class(size_t open) {
    const bool negate = Eat('^');
    CodePointRanges set;
    while (true) {
      if (!More()) return ErrorAt(open, "an unterminated character class '['");
      if (Eat(']')) break;
      const size_t start = pos_;
      absl::StatusOr<uint32_t> lo = Char(open, "character class '['");
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (More() && Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<uint32_t> end = Char(open, "character class '['");
        if (!end.ok()) return end.status();
        if (*end < *lo) return ErrorAt(start, "a class range out of order");
        hi = *end;
      }
      set.emplace_back(*lo, hi);
    }
    set = NormalizeCodePoints(std::move(set));
    return Utf8Set(negate ? ComplementCodePoints(set) : set);
  }

  const GbnfLimits& limits_;
  Grammar g_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<size_t> first_use_;                  // [rule]: offset of its first mention
  std::vector<std::optional<size_t>> defined_at_;  // [rule]: offset of its definition
};

// ---- Inlining the rules that do not recurse ----

void CollectRefs(const Expr& e, std::vector<int32_t>* out) {
  if (e.kind == Expr::Kind::kRef) out->push_back(e.rule);
  for (const Expr& k : e.kids) CollectRefs(k, out);
}

int64_t CountNodes(const Expr& e) {
  int64_t n = 1;
  for (const Expr& k : e.kids) n += CountNodes(k);
  return n;
}

// `e` with each reference to a rule in `inline_body` (non-null) replaced by that body.
Expr Substitute(const Expr& e, const std::vector<std::optional<Expr>>& inline_body) {
  if (e.kind == Expr::Kind::kRef && inline_body[e.rule].has_value()) return *inline_body[e.rule];
  Expr out = e;
  for (Expr& k : out.kids) k = Substitute(k, inline_body);
  return out;
}

// The grammar with every non-recursive rule of at most kMaxInlineNodes (once its own users are
// inlined) copied into its users, and only the rules still called from the root kept, root first.
Grammar InlineRules(const Grammar& g) {
  const int32_t n = g.num_rules();
  std::vector<std::vector<int32_t>> calls(n);
  for (int32_t r = 0; r < n; ++r) CollectRefs(g.body(r), &calls[r]);
  // A rule recurses when it can reach itself (an iterative search from each rule).
  std::vector<char> recursive(n, 0);
  for (int32_t r = 0; r < n; ++r) {
    std::vector<char> seen(n, 0);
    std::vector<int32_t> stack(calls[r].begin(), calls[r].end());
    while (!stack.empty() && !recursive[r]) {
      const int32_t q = stack.back();
      stack.pop_back();
      if (q == r) recursive[r] = 1;
      if (seen[q]) continue;
      seen[q] = 1;
      stack.insert(stack.end(), calls[q].begin(), calls[q].end());
    }
  }
  // Non-recursive rules in post-order (callees first): the calls among them form a DAG.
  std::vector<int32_t> order;
  std::vector<char> visited(n, 0);
  for (int32_t r = 0; r < n; ++r) {
    if (recursive[r] || visited[r]) continue;
    std::vector<std::pair<int32_t, size_t>> path = {{r, 0}};
    visited[r] = 1;
    while (!path.empty()) {
      auto& [q, i] = path.back();
      if (i < calls[q].size()) {
        const int32_t c = calls[q][i++];
        if (!recursive[c] && !visited[c]) {
          visited[c] = 1;
          path.push_back({c, 0});
        }
      } else {
        order.push_back(q);
        path.pop_back();
      }
    }
  }
  std::vector<std::optional<Expr>> inline_body(n);
  std::vector<Expr> body(n);
  for (int32_t r : order) {
    body[r] = Substitute(g.body(r), inline_body);
    if (CountNodes(body[r]) <= kMaxInlineNodes) inline_body[r] = body[r];
  }
  for (int32_t r = 0; r < n; ++r) {
    if (recursive[r]) body[r] = Substitute(g.body(r), inline_body);
  }
  // Keep what is still called, numbered from the root in order of discovery.
  std::vector<int32_t> new_id(n, -1);
  std::vector<int32_t> kept = {g.root()};
  new_id[g.root()] = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    std::vector<int32_t> refs;
    CollectRefs(body[kept[i]], &refs);
    for (int32_t q : refs) {
      if (new_id[q] < 0) {
        new_id[q] = static_cast<int32_t>(kept.size());
        kept.push_back(q);
      }
    }
  }
  Grammar out;
  for (int32_t r : kept) out.AddRule(g.name(r));
  for (int32_t r : kept) {
    Expr b = std::move(body[r]);
    std::vector<Expr*> stack = {&b};
    while (!stack.empty()) {
      Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == Expr::Kind::kRef) e->rule = new_id[e->rule];
      for (Expr& k : e->kids) stack.push_back(&k);
    }
    out.SetBody(new_id[r], std::move(b));
  }
  out.set_root(0);
  return out;
}

}  // namespace

absl::StatusOr<Grammar> GbnfToGrammar(std::string_view text, const GbnfLimits& limits) {
  if (text.size() > static_cast<size_t>(limits.max_length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GBNF: the grammar is longer than ", limits.max_length, " bytes"));
  }
  Parser parser(text, limits);
  absl::StatusOr<Grammar> written = parser.Parse();
  if (!written.ok()) return written.status();
  return InlineRules(*written);
}

}  // namespace banyan::text::grammar
