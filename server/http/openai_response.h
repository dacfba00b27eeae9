// Building OpenAI response bodies from TokenEvents: whole responses ("text_completion",
// "chat.completion") and streaming chunks ("text_completion" / "chat.completion.chunk").
//
// Choice index i * n + j is sample j of prompt i. Each choice's text is the concatenation of its
// events' text (the scheduler has already made it final and removed stop strings); with `echo`
// (completions) the prompt's text comes first. finish_reason spells the scheduler's reason as
// OpenAI does ("stop", "length"), and "abort" (vLLM's word) for a request cut by cancellation or
// shutdown.
//
// Chat with tools (ParsedGeneration::tool_family): each choice's text is read for calls
// (text/tool_calls/tool_call_parser.h). A whole response gives them as message.tool_calls
// [{id: "call_<random>", type: "function", function: {name, arguments: JSON text}}], content the
// text outside the calls (null when there is none), finish_reason "tool_calls" when the sample
// stopped after calls. A stream gives delta.tool_calls[{index, id, type, function: {name,
// arguments: ""}}] when a call's name is known, then {index, function: {arguments: piece}} as
// they come, and "tool_calls" as the last chunk's finish_reason.
//
// Chat with a reasoning parser (ParsedGeneration::reasoning, text/reasoning.h): each choice's
// text is split first. A whole response's message carries reasoning_content (the thinking, null
// when there is none) and content (the text after "</think>", null when empty: an output cut
// while thinking has none); a stream's deltas carry reasoning_content pieces while the model
// thinks and content pieces after, never a piece of a marker. Tool calls are read from the
// content only. Where the prompt closed the thinking, everything is content and
// reasoning_content is null.
//
// Log-probabilities: a token is shown as its vocabulary piece with "▁" as a space; a byte-fallback
// piece <0xNN> as that byte when it is ASCII, else as "bytes:\xNN" (OpenAI's spelling for a token
// that is not valid UTF-8 on its own); chat's `bytes` field holds the token's raw bytes.
// Completions' text_offset counts code points of the choice's text before the token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"
#include "scheduler/request.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "text/reasoning.h"
#include "text/tool_calls/tool_call_parser.h"

namespace banyan::server::http {

struct TokenRepr {
  std::string text;            // how the token is shown
  std::vector<uint8_t> bytes;  // its raw bytes
};
TokenRepr DescribeToken(const text::Tokenizer& tokenizer, int32_t id);

// "stop", "length", "abort", "error"; "" while running.
std::string_view FinishReasonString(scheduler::FinishReason reason);

Json UsageJson(const scheduler::Usage& usage);

class ResponseBuilder {
 public:
  // `parsed` supplies the API, echo texts and log-probability settings; `n` samples per prompt.
  ResponseBuilder(const ParsedGeneration& parsed, std::string id, int64_t created,
                  std::string model, const text::Tokenizer* tokenizer, int n);

  int num_choices() const { return static_cast<int>(choices_.size()); }

  // --- whole response
  void Add(int choice, const scheduler::TokenEvent& event);
  Json Final(const scheduler::Usage& usage) const;

  // --- streaming
  // Chunks sent before any token: chat's {"role":"assistant"} delta per choice, completions'
  // echoed prompt text per choice.
  std::vector<Json> StartChunks();
  // The chunk for one event (also folded into the choice); null when it carries nothing.
  Json Chunk(int choice, const scheduler::TokenEvent& event);
  // The final usage chunk (choices: []), for stream_options.include_usage.
  Json UsageChunk(const scheduler::Usage& usage) const;

 private:
  struct Choice {
    std::string text;
    int64_t code_points = 0;  // in text
    std::string finish_reason;
    // Completions logprobs.
    Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
         text_offset = Json::array();
    // Chat logprobs: content entries.
    Json content = Json::array();
    // Chat with tools, streaming: the calls read so far and what of them was sent.
    std::optional<text::tool_calls::ToolCallParser> tool_parser;
    std::vector<std::string> call_ids;  // one per call announced
    std::vector<size_t> args_sent;      // bytes of each call's arguments sent
    size_t content_sent = 0;            // bytes of the parser's content sent
    // Chat with a reasoning parser, streaming: where the text stands in the thinking.
    std::optional<text::ReasoningSplitter> reasoning;
  };

  Json ChunkEnvelope() const;
  // Appends the log-probabilities of `event` to `choice` and returns them in the shape of a
  // streaming chunk (completions: {tokens, ...}; chat: {content: [...]}).
  Json FoldLogprobs(Choice* choice, const scheduler::TokenEvent& event);
  void AppendText(Choice* choice, const std::string& text);
  Json TokenEntry(int32_t id, float logprob) const;  // chat: {token, logprob, bytes}
  // Streaming with tools: the delta for `text` (content outside calls, tool_calls pieces).
  Json ToolDelta(Choice* choice, const std::string& text, bool finished);
  // A whole message's content: the answer as it is, or null where a reasoning parser found
  // none (an output cut while thinking), as vLLM answers.
  Json MessageContent(const std::string& answer) const;
  // "tool_calls" instead of "stop" when the choice made calls.
  std::string ToolFinishReason(const std::string& reason, bool made_calls) const;

  Api api_;
  std::string id_;
  int64_t created_;
  std::string model_;
  const text::Tokenizer* tokenizer_;
  bool logprobs_;
  bool include_usage_;
  std::vector<std::string> echo_texts_;
  text::tool_calls::ToolFamily tool_family_;
  bool reasoning_field_;  // chat with a reasoning parser: message.reasoning_content is shown
  bool reasoning_;        // and the output starts in the thinking: split it from the content
  int n_;
  std::vector<Choice> choices_;
};

}  // namespace banyan::server::http
