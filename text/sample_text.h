// SampleText: turns one sample's tokens into final text for streaming, with stop strings.
//
// Contract: the concatenation of every Push() result plus Finish() is the sample's decoded text
// cut before the first occurrence of any stop string (nothing of the stop string is emitted).
// Text that might be the start of a stop string is held back until it cannot be; every returned
// piece is complete UTF-8 (the detokenizer guarantees it, and stop strings start on character
// boundaries).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "text/tokenizer/incremental_detokenizer.h"
#include "text/tokenizer/tokenizer.h"

namespace banyan::text {

class SampleText {
 public:
  // `context`: the prompt. Its tokens prime the detokenizer (their text is not emitted) so that
  // the first generated piece keeps its leading space as a continuation of the prompt, as
  // OpenAI-style completions expect ("Once upon a time" + " there").
  SampleText(const text::Tokenizer& tokenizer, std::vector<std::string> stop,
             std::span<const int32_t> context = {});

  // Adds a token; returns newly final text. Sets *stopped when a stop string matched (the text
  // before it is returned; everything after is dropped; further pushes return nothing).
  // match_stops false (min_tokens not reached yet): no stop string ends the sample at this
  // token; a possible stop-string start is still held back, so a match that ends in a later
  // token counts, as vLLM's window does.
  std::string Push(int32_t token, bool* stopped, bool match_stops = true);
  // The sample ended without a stop string: returns the held-back text.
  std::string Finish();

 private:
  text::IncrementalDetokenizer detok_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded text not yet emitted
  bool stopped_ = false;
};

}  // namespace banyan::text
