#include "text/tokenizer/tokenizer.h"

#include "text/tokenizer/bpe_tokenizer.h"
#include "text/tokenizer/spm_tokenizer.h"
#include "common/utf8.h"

namespace banyan::text {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  if (path.ends_with(".json")) return BpeTokenizer::FromJsonFile(path);
  return SpmTokenizer::FromFile(path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(SpmVocab vocab) {
  return SpmTokenizer::FromVocab(std::move(vocab));
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string text;
  DecodeState state;
  for (const int32_t id : ids) DecodeStep(id, &state, &text);
  FinishDecode(&state, &text);
  return text;
}

void Tokenizer::FinishDecode(DecodeState* state, std::string* out) {
  DrainPending(/*complete=*/true, state, out);
}

void Tokenizer::DrainPending(bool complete, DecodeState* state, std::string* out) {
  if (state->pending.empty()) return;
  const size_t before = out->size();
  state->pending.erase(0, utf8::AppendByteRun(state->pending, complete, out));
  if (out->size() > before) state->text_empty = false;
}

}  // namespace banyan::text
