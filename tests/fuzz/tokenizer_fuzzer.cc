// Fuzzes the bundled tokenizer (models/stories260K/tok512.model, BPE with byte fallback):
//  - the input as text: Encode gives in-range ids; Decode gives valid UTF-8; decoding is a
//    fixed point (encoding the decoded text and decoding again gives the same text) unless the
//    text holds a literal U+2581: it decodes to a space that whitespace collapsing then merges
//    with its neighbour, in sentencepiece too ("a\u2581 b" -> "a  b" -> "a b");
//  - the input as little-endian int16 token ids (some out of range): the incremental
//    detokenizer's output equals Decode, as its contract says, and is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/incremental_detokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::text {
namespace {

const text::Tokenizer& Bundled() {
  static const text::Tokenizer* tokenizer = [] {
    auto t = text::Tokenizer::FromFile(fuzz::BundledTokenizerPath());
    FUZZ_CHECK(t.ok());
    return t->release();
  }();
  return *tokenizer;
}

bool IsUtf8(std::string_view s) {
  size_t len = 0;
  while (!s.empty()) {
    if (!utf8::DecodeFirst(s, &len)) return false;
    s.remove_prefix(len);
  }
  return true;
}

void FuzzText(std::string_view text, bool add_bos, const text::Tokenizer& tok) {
  const std::vector<int32_t> ids = tok.Encode(text, add_bos);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  const std::string decoded = tok.Decode(ids);
  FUZZ_CHECK(IsUtf8(decoded));
  if (text.find(utf8::kSpaceSymbol) != std::string_view::npos) return;
  const std::string again = tok.Decode(tok.Encode(decoded, add_bos));
  if (again != decoded) {
    std::fprintf(stderr, "decoded: %s\nagain:   %s\n", fuzz::Escape(decoded).c_str(),
                 fuzz::Escape(again).c_str());
  }
  FUZZ_CHECK(again == decoded);
}

void FuzzIds(const uint8_t* data, size_t size, const text::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= size; i += 2) {
    int16_t v;
    std::memcpy(&v, data + i, sizeof(v));
    ids.push_back(v);
  }
  text::IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.Push(id);
    FUZZ_CHECK(IsUtf8(piece));
    streamed += piece;
  }
  streamed += detok.Flush();
  FUZZ_CHECK(streamed == tok.Decode(ids));
  FUZZ_CHECK(IsUtf8(streamed));
}

}  // namespace
}  // namespace banyan::text

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::text;
  const Tokenizer& tok = Bundled();
  const bool add_bos = size > 0 && (data[0] & 1) != 0;
  FuzzText(std::string_view(reinterpret_cast<const char*>(data), size), add_bos, tok);
  FuzzIds(data, size, tok);
  return 0;
}
