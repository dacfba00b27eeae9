// IncrementalDetokenizer: turns a stream of token ids into text as the tokens arrive, for
// streaming responses.
//
// Contract: for any id sequence, the concatenation of Push(id) over the sequence followed by
// Flush() equals Tokenizer::Decode(sequence). Every returned string is valid UTF-8: bytes of
// byte pieces (<0xXX>) and of byte-level pieces (where one character may span several tokens)
// are held back until they complete a character; a byte that cannot start or continue a valid
// character is emitted as U+FFFD as soon as that is certain (at the latest when a text piece
// arrives, or at Flush). Leading spaces are dropped exactly where Decode drops them.
//
// Not thread-safe: one instance per stream. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer/tokenizer.h"

namespace banyan::text {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Text completed by `id` (possibly empty). Ids outside the vocabulary are ignored.
  std::string Push(int32_t id);

  // Ends the stream: emits held bytes (each incomplete sequence's bytes become U+FFFD). Pushing
  // after Flush continues the text as if the stream had been cut there.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  Tokenizer::DecodeState state_;
};

}  // namespace banyan::text
