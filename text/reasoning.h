// Reasoning output: the thinking a reasoning model (Qwen 3, DeepSeek-R1) writes between <think>
// and </think>, told apart from the answer after it, as vLLM's reasoning parsers (`qwen3`,
// `deepseek_r1`) do. The one place that splits a chat output into reasoning and content; the
// HTTP front end (server/http/openai_response.h) reads every choice through it.
//
// How an output is read:
//   - an optional "<think>" at its start (after whitespace) is dropped: some templates leave it to
//     the model, others (Qwen 3's) put it in the prompt, and then the output starts inside the
//     thinking;
//   - everything before the first "</think>" is reasoning, everything after it is content (a
//     later "</think>" is content text);
//   - without "</think>" (cut by max_tokens, or a model that did not think) everything is
//     reasoning and there is no content, as vLLM answers with thinking on.
// Neither marker appears in either part. The markers are ASCII, so holding back a possible
// marker never splits a UTF-8 character: pieces that start and end on character boundaries give
// parts that do too.
//
// Contract of ReasoningSplitter: for every split of a text into pieces, the reasoning (and the
// content) returned by Feed over the pieces and then Finish concatenate to SplitReasoning's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace banyan::text {

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

// banyand's --reasoning-parser, with vLLM's names. Both parsers read the same markers; the names
// are kept apart so that a model-specific rule can be added to one without renaming a flag.
enum class ReasoningParser { kNone, kQwen3, kDeepSeekR1 };

// "qwen3", "deepseek_r1"; nullopt for any other name.
std::optional<ReasoningParser> ReasoningParserFromName(std::string_view name);
// The names ReasoningParserFromName accepts, for error messages ("qwen3, deepseek_r1").
std::string_view ReasoningParserNames();

struct ReasoningParts {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // The newly decided parts after `piece`. Text that may be the start of a marker is held back
  // until the next pieces decide it.
  ReasoningParts Feed(std::string_view piece);
  // The output ended: what was held back (an unfinished marker is text the model wrote, hence
  // reasoning).
  ReasoningParts Finish();
  // "</think>" has been seen: everything from here on is content.
  bool ended() const { return state_ == State::kContent; }

 private:
  enum class State {
    kStart,      // nothing decided yet: a "<think>" may still open the output
    kReasoning,  // inside the thinking
    kContent,    // after "</think>"
  };
  State state_ = State::kStart;
  std::string held_;  // bytes not yet given out
};

// A whole output's parts.
ReasoningParts SplitReasoning(std::string_view text);

// Whether a rendered chat prompt closes the thinking itself: its last "</think>" comes after its
// last "<think>" and only whitespace follows it. Qwen 3's template does so with enable_thinking
// false ("<think>\n\n</think>\n\n" after the assistant's header): the output is then all content.
bool PromptClosesThinking(std::string_view prompt);

}  // namespace banyan::text
