// PCRE2 as the oracle of the grammar engine's regular front ends (regex_test.cc, gbnf_test.cc).
#pragma once

#include <cstdint>
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace banyan::text::grammar {

// PCRE2, the oracle: a backtracking engine, bounded by a match limit so that a pattern it would
// explore exponentially is skipped (counted) instead of running for minutes, as std::regex did.
class Pcre2Oracle {
 public:
  // options: pcre2_compile's (PCRE2_UTF: the pattern and texts are UTF-8, a text that is not is
  // left unanswered).
  explicit Pcre2Oracle(const std::string& pattern, uint32_t options = 0) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                          &offset, nullptr);
    match_ = code_ ? pcre2_match_data_create_from_pattern(code_, nullptr) : nullptr;
    context_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context_, 200000);
    pcre2_set_depth_limit(context_, 10000);
  }
  ~Pcre2Oracle() {
    pcre2_match_data_free(match_);
    pcre2_match_context_free(context_);
    pcre2_code_free(code_);
  }
  bool ok() const { return code_ != nullptr; }
  // 1: matches, 0: does not, -1: the match limit was reached (no answer).
  int Match(const std::string& text, bool whole) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                               whole ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0, match_, context_);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return -1;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* match_ = nullptr;
  pcre2_match_context* context_ = nullptr;
};

}  // namespace banyan::text::grammar
