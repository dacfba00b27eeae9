#include "engine/tokenizer/incremental_detokenizer.h"

#include "engine/tokenizer/utf8.h"

namespace banyan::engine {

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string out;
  if (!tokenizer_.IsValidId(id)) return out;
  if (const int b = tokenizer_.ByteOf(id); b >= 0) {
    pending_bytes_.push_back(static_cast<char>(b));
    pending_bytes_.erase(0, utf8::AppendByteRun(pending_bytes_, /*complete=*/false, &out));
  } else {
    // A non-byte piece ends the byte run, as in Decode; whatever the run held is text now.
    out = Flush();
    tokenizer_.AppendPieceText(id, text_empty_, &state_, &out);
  }
  if (!out.empty()) text_empty_ = false;
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  utf8::AppendByteRun(pending_bytes_, /*complete=*/true, &out);
  pending_bytes_.clear();
  if (!out.empty()) text_empty_ = false;
  return out;
}

}  // namespace banyan::engine
