// TextCursor: the read position of the hand-written front-end parsers (regex.cc, gbnf.cc) over
// their source text, and the three steps both take at every token.
#ifndef BANYAN_TEXT_GRAMMAR_TEXT_CURSOR_H_
#define BANYAN_TEXT_GRAMMAR_TEXT_CURSOR_H_

#include <cstddef>
#include <string_view>

namespace banyan::text::grammar {

struct TextCursor {
  explicit TextCursor(std::string_view text) : text_(text) {}

  bool More() const { return pos_ < text_.size(); }
  char Peek() const { return text_[pos_]; }  // More() first
  // Steps over `c` when it is next.
  bool Eat(char c) {
    if (More() && Peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_TEXT_CURSOR_H_
