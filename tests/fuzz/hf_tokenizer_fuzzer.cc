// Fuzzes tokenizer.json parsing and the tokenizer it builds. The input is a JSON document; a
// document that parses and validates must give a BpeTokenizer whose Encode of a fixed text and
// of the input itself gives in-range ids, whose Decode is valid UTF-8, and whose incremental
// detokenizer's output equals Decode. Anything else must be an error status, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/bpe_tokenizer.h"
#include "text/tokenizer/hf_json_reader.h"
#include "text/tokenizer/incremental_detokenizer.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_util.h"

namespace banyan::text {
namespace {

bool IsUtf8(std::string_view s) {
  size_t len = 0;
  while (!s.empty()) {
    if (!utf8::DecodeFirst(s, &len)) return false;
    s.remove_prefix(len);
  }
  return true;
}

void Check(const text::Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true);
  for (const int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  const std::string decoded = tok.Decode(ids);
  FUZZ_CHECK(IsUtf8(decoded));
  text::IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (const int32_t id : ids) streamed += detok.Push(id);
  streamed += detok.Flush();
  FUZZ_CHECK(streamed == decoded);
}

}  // namespace
}  // namespace banyan::text

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::text;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<BpeSpec> spec = ParseHfTokenizerJson(input, "", "fuzz.json");
  if (!spec.ok()) return 0;
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::Create(*std::move(spec));
  if (!tok.ok()) return 0;
  Check(**tok, "Hello wörld  12345 \xF0\x9F\x99\x82<s>\n");
  Check(**tok, input.substr(0, 256));
  return 0;
}
