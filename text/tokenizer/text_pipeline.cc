#include "text/tokenizer/text_pipeline.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/utf8.h"

namespace banyan::text {
namespace {

// GPT-2's pre-tokenizer pattern, which ByteLevel uses when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// \s and \S as Oniguruma (and so `tokenizers`) reads them: Unicode White_Space.
std::string RewriteSpaceClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[++i];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out.push_back('\\');
        out.push_back(c);
      }
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

// Unicode White_Space, as Rust's char::is_whitespace.
bool IsWhiteSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Decodes the code point at text[*pos] (valid UTF-8) and advances *pos.
uint32_t NextCodePoint(std::string_view text, size_t* pos) {
  utf8proc_int32_t cp = 0;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + *pos),
                       static_cast<utf8proc_ssize_t>(text.size() - *pos), &cp);
  *pos += n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? static_cast<uint32_t>(cp) : 0xFFFD;
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// U+11A7 is Hangul's TBase: TIndex 0 means "no trailing consonant", so canonical composition joins
// an LV syllable with U+11A8..U+11C2 only (Unicode ch. 3.12); U+11A7 itself is a vowel jamo that
// nothing composes with. utf8proc releases before JuliaStrings/utf8proc#317 (Debian 12 has 2.8)
// compose LV + U+11A7 into LV and so delete the U+11A7; `tokenizers` (Rust and JS) and Python keep
// it. As U+11A7 is a starter that never composes backwards, text composes independently on either
// side of it: composing the decomposed text in pieces that each begin at a U+11A7 avoids the bug
// and changes nothing else.
constexpr utf8proc_int32_t kHangulTBase = 0x11A7;

// `text` in the normalization form `options` selects (UTF8PROC_COMPOSE or UTF8PROC_DECOMPOSE, with
// or without UTF8PROC_COMPAT): utf8proc_map's steps, with the composition split at U+11A7.
std::string UnicodeNormalize(const std::string& text, int options) {
  const auto flags = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options);
  const auto* in = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto in_size = static_cast<utf8proc_ssize_t>(text.size());
  // Decomposed and canonically ordered code points; a second pass when the first buffer was short.
  std::vector<utf8proc_int32_t> cps(text.size() + 1);
  utf8proc_ssize_t n =
      utf8proc_decompose(in, in_size, cps.data(), static_cast<utf8proc_ssize_t>(cps.size()), flags);
  if (n > static_cast<utf8proc_ssize_t>(cps.size())) {
    cps.resize(static_cast<size_t>(n));
    n = utf8proc_decompose(in, in_size, cps.data(), n, flags);
  }
  if (n < 0) return text;  // cannot happen on valid UTF-8
  std::string out;
  out.reserve(text.size());
  for (utf8proc_ssize_t begin = 0; begin < n;) {
    utf8proc_ssize_t end = begin + 1;
    while (end < n && cps[static_cast<size_t>(end)] != kHangulTBase) ++end;
    utf8proc_int32_t* piece = cps.data() + begin;
    const utf8proc_ssize_t piece_size = utf8proc_normalize_utf32(piece, end - begin, flags);
    for (utf8proc_ssize_t i = 0; i < piece_size; ++i) {
      AppendCodePoint(static_cast<uint32_t>(piece[i]), &out);
    }
    begin = end;
  }
  return out;
}

std::string Lowercase(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    AppendCodePoint(static_cast<uint32_t>(
                        utf8proc_tolower(static_cast<utf8proc_int32_t>(NextCodePoint(text, &pos)))),
                    &out);
  }
  return out;
}

}  // namespace

// ---- Regex ----

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  const std::string rewritten = RewriteSpaceClasses(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regular expression '", std::string(pattern),
                                                   "' does not compile at offset ", offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  auto compiled = std::make_shared<Code>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(compiled));
}

namespace {

// A JIT stack per thread, larger than PCRE2's 32 KiB default so long runs of one class match.
pcre2_match_context* ThreadMatchContext() {
  struct Context {
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    Context() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~Context() {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(context);
    }
  };
  thread_local Context context;
  return context.context;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    int rc = PCRE2_ERROR_NOMATCH;
    if (code_->jit) {
      rc = pcre2_jit_match(code_->code, subject, text.size(), pos, 0, data, ThreadMatchContext());
    }
    if (!code_->jit || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
      // The interpreter, also when the JIT ran out of stack.
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr);
    }
    if (rc < 0) break;  // no more matches (or a resource limit: the rest stays unmatched)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      pos = end;
    } else {
      if (begin >= text.size()) break;
      pos = begin + static_cast<size_t>(utf8::OneCharLen(static_cast<uint8_t>(text[begin])));
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

// ---- ByteLevelAlphabet ----

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet* alphabet = new ByteLevelAlphabet();
  return *alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  // Printable Latin-1 bytes spell themselves; the others take code points from U+0100 up.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    AppendCodePoint(cp, &spelling_[b]);
    byte_of_[cp] = static_cast<uint8_t>(b);
  }
}

void ByteLevelAlphabet::SpellAll(std::string_view bytes, std::string* out) const {
  for (const char c : bytes) out->append(spelling_[static_cast<uint8_t>(c)]);
}

bool ByteLevelAlphabet::Unspell(std::string_view piece, std::string* out) const {
  std::string bytes;
  bytes.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    const auto it = byte_of_.find(NextCodePoint(piece, &pos));
    if (it == byte_of_.end()) return false;
    bytes.push_back(static_cast<char>(it->second));
  }
  out->append(bytes);
  return true;
}

// ---- Splitting ----

std::vector<std::string> SplitText(std::string_view text, const Regex* regex,
                                   std::string_view literal, SplitBehavior behavior, bool invert) {
  // (begin, end, is_match) spans covering `text`, as `tokenizers`' find_matches.
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<std::pair<size_t, size_t>> hits;
  if (regex != nullptr) {
    hits = regex->FindAll(text);
  } else if (!literal.empty()) {
    for (size_t pos = text.find(literal); pos != std::string_view::npos;
         pos = text.find(literal, pos + literal.size())) {
      hits.emplace_back(pos, pos + literal.size());
    }
  }
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [begin, end] : hits) {
    if (begin > prev) spans.push_back({prev, begin, invert});
    spans.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !pieces.empty()) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        previous_match = it->match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].match == spans[i - 1].match) {
          pieces.back().second = spans[i].end;
        } else {
          pieces.emplace_back(spans[i].begin, spans[i].end);
        }
      }
      break;
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) {
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  }
  return out;
}

std::string_view TrimWhiteSpace(std::string_view text, bool left, bool right) {
  size_t begin = 0;
  if (left) {
    for (size_t pos = 0; pos < text.size() && IsWhiteSpace(NextCodePoint(text, &pos));) begin = pos;
  }
  size_t end = text.size();
  if (right) {
    end = begin;
    for (size_t pos = begin; pos < text.size();) {
      if (!IsWhiteSpace(NextCodePoint(text, &pos))) end = pos;
    }
  }
  return text.substr(begin, end - begin);
}

std::string SanitizeUtf8(std::string_view text) {
  size_t pos = 0;
  size_t length = 0;
  while (pos < text.size() && utf8::DecodeFirst(text.substr(pos), &length)) pos += length;
  if (pos == text.size()) return std::string(text);
  std::string out(text.substr(0, pos));
  while (pos < text.size()) {
    if (utf8::DecodeFirst(text.substr(pos), &length)) {
      out.append(text.substr(pos, length));
    } else {
      out.append(utf8::kReplacementChar);
    }
    pos += length;
  }
  return out;
}

// ---- TextPipeline ----

absl::StatusOr<TextPipeline> TextPipeline::Create(const BpeSpec& spec) {
  TextPipeline p;
  for (const NormalizerStep& step : spec.normalizers) {
    Normalizer n{step, nullptr};
    if (step.kind == NormalizerStep::Kind::kReplace && step.regex) {
      absl::StatusOr<Regex> regex = Regex::Compile(step.pattern);
      if (!regex.ok()) return regex.status();
      n.regex = std::make_shared<Regex>(*std::move(regex));
    }
    p.normalizers_.push_back(std::move(n));
  }
  for (const PreTokenizerStep& step : spec.pre_tokenizers) {
    PreTokenizer t{step, nullptr};
    std::string_view pattern;
    if (step.kind == PreTokenizerStep::Kind::kSplit && step.regex) pattern = step.pattern;
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.use_regex) pattern = kGpt2Pattern;
    if (step.kind == PreTokenizerStep::Kind::kDigits) {
      pattern = step.individual_digits ? R"(\p{N})" : R"(\p{N}+)";
    }
    if (!pattern.empty()) {
      absl::StatusOr<Regex> regex = Regex::Compile(pattern);
      if (!regex.ok()) return regex.status();
      t.regex = std::make_shared<Regex>(*std::move(regex));
    }
    p.pre_tokenizers_.push_back(std::move(t));
  }
  return p;
}

std::string TextPipeline::Normalize(std::string text) const {
  using Kind = NormalizerStep::Kind;
  for (const Normalizer& n : normalizers_) {
    const NormalizerStep& s = n.step;
    switch (s.kind) {
      case Kind::kPrepend:
        if (!text.empty()) text.insert(0, s.pattern);
        break;
      case Kind::kReplace:
        if (n.regex == nullptr) {
          if (!s.pattern.empty()) text = absl::StrReplaceAll(text, {{s.pattern, s.content}});
        } else {
          std::string out;
          size_t prev = 0;
          for (const auto& [begin, end] : n.regex->FindAll(text)) {
            out.append(text, prev, begin - prev);
            out.append(s.content);
            prev = end;
          }
          out.append(text, prev, std::string::npos);
          text = std::move(out);
        }
        break;
      case Kind::kNfc:
        text = UnicodeNormalize(text, UTF8PROC_COMPOSE);
        break;
      case Kind::kNfd:
        text = UnicodeNormalize(text, UTF8PROC_DECOMPOSE);
        break;
      case Kind::kNfkc:
        text = UnicodeNormalize(text, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kNfkd:
        text = UnicodeNormalize(text, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kLowercase:
        text = Lowercase(text);
        break;
      case Kind::kStrip:
        text = std::string(TrimWhiteSpace(text, s.left, s.right));
        break;
    }
  }
  return text;
}

std::vector<std::string> TextPipeline::PreTokenize(std::string text, bool at_text_start) const {
  using Kind = PreTokenizerStep::Kind;
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(std::move(text));
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  for (const PreTokenizer& t : pre_tokenizers_) {
    const PreTokenizerStep& s = t.step;
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& piece = pieces[i];
      std::vector<std::string> parts;
      switch (s.kind) {
        case Kind::kSplit:
          parts = SplitText(piece, t.regex.get(), s.pattern, s.behavior, s.invert);
          break;
        case Kind::kDigits:
          parts = SplitText(piece, t.regex.get(), "", SplitBehavior::kIsolated, false);
          break;
        case Kind::kByteLevel: {
          // (StrCat: string::insert trips a GCC 12 -Wrestrict false positive here.)
          if (s.add_prefix_space && !piece.starts_with(' ')) piece = absl::StrCat(" ", piece);
          std::vector<std::string> words;
          if (t.regex != nullptr) {
            words = SplitText(piece, t.regex.get(), "", SplitBehavior::kIsolated, false);
          } else {
            words.push_back(std::move(piece));
          }
          for (const std::string& w : words) {
            std::string spelled;
            alphabet.SpellAll(w, &spelled);
            parts.push_back(std::move(spelled));
          }
          break;
        }
        case Kind::kMetaspace: {
          std::string replaced = absl::StrReplaceAll(piece, {{" ", s.replacement}});
          const bool prepend =
              s.prepend == PreTokenizerStep::Prepend::kAlways ||
              (s.prepend == PreTokenizerStep::Prepend::kFirst && at_text_start && i == 0);
          if (prepend && !replaced.starts_with(s.replacement)) replaced.insert(0, s.replacement);
          if (s.split) {
            parts =
                SplitText(replaced, nullptr, s.replacement, SplitBehavior::kMergedWithNext, false);
          } else {
            parts.push_back(std::move(replaced));
          }
          break;
        }
      }
      for (std::string& p : parts) next.push_back(std::move(p));
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace banyan::text
