// Reading tool calls back out of generated text, as it streams.
//
// The text is fed in pieces of any size (a token's text, or a byte at a time); after each Feed,
// content() is the text outside calls that can no longer turn out to be part of one, and calls()
// the calls begun so far: a call's name once its "name" has been read, its arguments as the JSON
// text written so far (whole once `complete`). Both only grow, so a streaming front end sends
// what is new after each Feed; Finish() settles the end of the output.
//
// What a call is, per family (tool_syntax.h):
//   kHermes   "<tool_call>" ws {object} ws "</tool_call>" (a missing close tag is forgiven);
//   kMistral  "[TOOL_CALLS]" ws "[" {object} ("," {object})* "]"; the marker may be missing at
//             the start of the output (it is a control token the detokenizer drops);
//   kLlama3   an {object} first thing in the output (after whitespace, optionally
//             "<|python_tag|>"), more objects after ";".
// {object} is a JSON object with a string "name" and the arguments under "arguments" (Llama:
// "parameters"; either key is read in every family), an object or a string holding JSON;
// missing arguments read as "{}". Whitespace around calls is not content. Arguments are the
// object's text as written (so the streamed pieces add up to the final value); a string holding
// JSON is given as its contents, at once when the call completes.
//
// A call whose text is not such an object (bad JSON, no name) or that the output cuts short is
// no call: its text from its start (the marker, when it was the first of its section) becomes
// content, and so does everything after it. Earlier calls stand.
#ifndef BANYAN_TEXT_TOOL_CALLS_TOOL_CALL_PARSER_H_
#define BANYAN_TEXT_TOOL_CALLS_TOOL_CALL_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "text/tool_calls/tool_syntax.h"

namespace banyan::text::tool_calls {

struct ParsedToolCall {
  std::string name;       // "" until the name has been read
  std::string arguments;  // JSON text; a prefix of it until `complete`
  bool complete = false;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolFamily family);

  void Feed(std::string_view text);
  // The output ended. Idempotent.
  void Finish();

  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& calls() const { return calls_; }
  // The calls that completed (all of calls() after Finish).
  size_t complete_calls() const;

 private:
  enum class State {
    kText,         // looking for a call
    kListStart,    // Mistral: before "["
    kObjectStart,  // before a call's "{"
    kObject,       // inside a call's object
    kAfterObject,  // after a call's "}"
    kPlain,        // a call failed: the rest is content
  };

  void Run();
  // Returns false when it must wait for more text.
  bool StepText();
  bool StepAfterObject();
  void StepObjectByte(char c);
  void ReadHeader();
  void CompleteObject();
  void Fail();

  ToolFamily family_;
  std::string buf_;  // everything fed
  size_t pos_ = 0;   // next byte of buf_ to read
  State state_ = State::kText;
  bool finished_ = false;
  bool at_start_ = true;            // nothing but whitespace before pos_
  bool after_calls_ = false;        // in kText with nothing but whitespace since a call
  size_t pending_ws_ = std::string::npos;  // start of a whitespace run not yet content
  // Where content resumes if the call being read fails: the start of its section (the marker),
  // or the end of the section's last complete call.
  size_t fail_from_ = 0;

  // The object being read.
  size_t obj_start_ = 0;
  int depth_ = 0;  // of braces and brackets, 0 outside the object
  bool in_string_ = false;
  bool escape_ = false;
  size_t args_start_ = std::string::npos;  // where the arguments' value begins
  size_t args_end_ = std::string::npos;    // just past it, once closed
  bool header_done_ = false;               // name and args_start_ read (or given up on)

  std::string content_;
  std::vector<ParsedToolCall> calls_;
};

}  // namespace banyan::text::tool_calls

#endif  // BANYAN_TEXT_TOOL_CALLS_TOOL_CALL_PARSER_H_
