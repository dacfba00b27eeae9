#include "text/jinja/lexer.h"

#include <cctype>

#include "text/jinja/value.h"

namespace banyan::text::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      const size_t open = FindTagOpen(pos_);
      const size_t text_end = open == std::string_view::npos ? src_.size() : open;
      if (text_end > pos_) {
        std::string text(src_.substr(pos_, text_end - pos_));
        if (strip_next_) {
          size_t i = 0;
          while (i < text.size() && IsSpace(text[i])) ++i;
          text.erase(0, i);
        }
        const int line = line_;
        Advance(text_end);
        if (!text.empty()) out_.push_back({TokenType::kText, std::move(text), line});
      } else {
        Advance(text_end);
      }
      strip_next_ = false;
      if (open == std::string_view::npos) break;
      LexTag();
    }
    out_.push_back({TokenType::kEnd, "", line_});
    return std::move(out_);
  }

 private:
  size_t FindTagOpen(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  void Advance(size_t to) {
    for (; pos_ < to; ++pos_) line_ += src_[pos_] == '\n';
  }

  // Before a tag: '-' strips the previous text's trailing whitespace; lstrip_blocks strips the
  // spaces and tabs between the line start and a block or comment tag.
  void TrimBefore(char kind, bool minus, size_t tag_pos) {
    if (out_.empty() || out_.back().type != TokenType::kText) return;
    std::string& t = out_.back().text;
    if (minus) {
      while (!t.empty() && IsSpace(t.back())) t.pop_back();
    } else if (kind != '{') {
      size_t i = t.size();
      while (i > 0 && (t[i - 1] == ' ' || t[i - 1] == '\t')) --i;
      // At a line start: after a newline in this text, or at the source's start.
      const bool line_start = i > 0 ? t[i - 1] == '\n' : tag_pos == t.size();
      if (line_start) t.erase(i);
    }
    if (t.empty()) out_.pop_back();
  }

  void LexTag() {
    const char kind = src_[pos_ + 1];  // '{', '%' or '#'
    const int line = line_;
    const size_t tag_pos = pos_;
    size_t p = pos_ + 2;
    const bool minus = p < src_.size() && src_[p] == '-';
    const bool plus = p < src_.size() && src_[p] == '+';  // `{%+`: no lstrip_blocks
    if (minus || plus) ++p;
    if (!plus) TrimBefore(kind, minus, tag_pos);
    if (kind == '#') {
      const size_t close = src_.find("#}", p);
      if (close == std::string_view::npos) throw Error("unterminated comment", line);
      strip_next_ = close > p && src_[close - 1] == '-';
      Advance(close + 2);
      TrimBlockNewline();
      return;
    }
    out_.push_back({kind == '{' ? TokenType::kExprBegin : TokenType::kBlockBegin, "", line});
    Advance(p);
    LexInside(kind);
  }

  void TrimBlockNewline() {
    if (!strip_next_ && pos_ < src_.size() && src_[pos_] == '\n') Advance(pos_ + 1);
  }

  // Tokens up to the closing `}}` or `%}` (braces of dict literals are balanced first).
  void LexInside(char kind) {
    const char close_first = kind == '{' ? '}' : '%';
    int depth = 0;  // open { [ ( inside the tag
    for (;;) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
      if (pos_ >= src_.size()) {
        throw Error(kind == '{' ? "unexpected end of template, expected '}}'"
                                : "unexpected end of template, expected '%}'",
                    line_);
      }
      const std::string_view rest = src_.substr(pos_);
      if (depth == 0) {
        const bool minus = rest.size() >= 3 && rest[0] == '-' && rest[1] == close_first &&
                           rest[2] == '}';
        if (minus || (rest.size() >= 2 && rest[0] == close_first && rest[1] == '}')) {
          out_.push_back({kind == '{' ? TokenType::kExprEnd : TokenType::kBlockEnd, "", line_});
          Advance(pos_ + (minus ? 3 : 2));
          strip_next_ = minus;
          if (kind == '%') TrimBlockNewline();
          return;
        }
      }
      const char c = rest[0];
      const int line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) {
          ++n;
        }
        out_.push_back({TokenType::kName, std::string(rest.substr(0, n)), line});
        Advance(pos_ + n);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t n = 0;
        while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        bool is_float = false;
        if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
          is_float = true;
          ++n;
          while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
            is_float = true;
            n = m;
            while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
          }
        }
        std::string num;
        for (char ch : rest.substr(0, n)) {
          if (ch != '_') num.push_back(ch);
        }
        out_.push_back({is_float ? TokenType::kFloat : TokenType::kInt, num, line});
        Advance(pos_ + n);
      } else if (c == '\'' || c == '"') {
        LexString(c);
      } else {
        static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
        std::string op(1, c);
        for (std::string_view two : kTwo) {
          if (rest.substr(0, 2) == two) op = std::string(two);
        }
        if (op.size() == 1 && std::string_view("+-*/%~<>=()[]{},.:|").find(c) ==
                                  std::string_view::npos) {
          throw Error(std::string("unexpected character '") + c + "' in a tag", line);
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        out_.push_back({TokenType::kOp, op, line});
        Advance(pos_ + op.size());
      }
    }
  }

  void LexString(char quote) {
    const int line = line_;
    std::string value;
    size_t p = pos_ + 1;
    for (;; ++p) {
      if (p >= src_.size()) throw Error("unterminated string literal", line);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\' || p + 1 >= src_.size()) {
        value.push_back(c);
        continue;
      }
      const char e = src_[++p];
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case '0': value.push_back('\0'); break;
        case '\\': case '\'': case '"': value.push_back(e); break;
        case '\n': break;  // a line continuation
        default:  // Python keeps unknown escapes as written
          value.push_back('\\');
          value.push_back(e);
      }
    }
    out_.push_back({TokenType::kString, std::move(value), line});
    Advance(p + 1);
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool strip_next_ = false;  // the previous tag ended with '-': strip the next text's whitespace
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace banyan::text::jinja
