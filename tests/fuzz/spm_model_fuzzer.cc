// Fuzzes the SentencePiece .model reader (text/tokenizer/spm_model_reader.h) on arbitrary
// bytes. A vocabulary that parses and validates must give a working Tokenizer: encoding a fixed
// text yields in-range ids and decoding any ids does not crash.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/tokenizer/spm_model_reader.h"
#include "text/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace banyan::text;
  absl::StatusOr<SpmVocab> vocab =
      ParseSpmModel(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.model");
  if (!vocab.ok()) return 0;
  if (!ValidateSpmVocab(*vocab).ok()) return 0;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromVocab(std::move(*vocab));
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids =
      (*tok)->Encode("Once upon a time,  a \xE2\x96\x81 caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF!", true);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < (*tok)->vocab_size());
  (void)(*tok)->Decode(ids);
  std::vector<int32_t> all;
  for (int32_t id = -1; id <= (*tok)->vocab_size() && id < 4096; ++id) all.push_back(id);
  (void)(*tok)->Decode(all);
  return 0;
}
