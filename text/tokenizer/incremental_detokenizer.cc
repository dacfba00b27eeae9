#include "text/tokenizer/incremental_detokenizer.h"

namespace banyan::text {

std::string IncrementalDetokenizer::Push(int32_t id) {
  std::string out;
  tokenizer_.DecodeStep(id, &state_, &out);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  Tokenizer::FinishDecode(&state_, &out);
  return out;
}

}  // namespace banyan::text
