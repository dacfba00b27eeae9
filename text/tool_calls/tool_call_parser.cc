#include "text/tool_calls/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "nlohmann/json.hpp"

namespace banyan::text::tool_calls {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHermesClose = "</tool_call>";
// The longest header ({"name": "...", "arguments": ) read while the call streams; past it the
// name is read when the object completes.
constexpr size_t kMaxHeaderBytes = 4096;

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// How `text` relates to `word` at its start: 1 it starts with word, 0 it is a proper prefix of
// word (wait for more), -1 neither.
int MatchAt(std::string_view text, std::string_view word) {
  if (word.empty()) return -1;
  if (text.size() >= word.size()) return text.substr(0, word.size()) == word ? 1 : -1;
  return word.substr(0, text.size()) == text ? 0 : -1;
}

// A JSON string starting at s[*i] == '"': its end (past the closing quote) in *i; false when
// `s` ends first.
bool SkipString(std::string_view s, size_t* i) {
  for (size_t j = *i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '"') {
      *i = j + 1;
      return true;
    }
  }
  return false;
}

void SkipWs(std::string_view s, size_t* i) {
  while (*i < s.size() && IsWs(s[*i])) ++*i;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFamily family) : family_(family) {}

size_t ToolCallParser::complete_calls() const {
  return static_cast<size_t>(std::count_if(calls_.begin(), calls_.end(),
                                           [](const ParsedToolCall& c) { return c.complete; }));
}

void ToolCallParser::Feed(std::string_view text) {
  if (finished_) return;
  buf_.append(text.data(), text.size());
  Run();
}

void ToolCallParser::Finish() {
  if (finished_) return;
  finished_ = true;
  Run();
  switch (state_) {
    case State::kText:
      // A marker's prefix that never completed, and (with no calls) the trailing whitespace.
      if (pending_ws_ != std::string::npos && calls_.empty()) {
        content_.append(buf_, pending_ws_, pos_ - pending_ws_);
      }
      content_.append(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
      break;
    case State::kListStart:
    case State::kObjectStart:
    case State::kObject:
      Fail();
      break;
    case State::kAfterObject:
    case State::kPlain:
      break;
  }
}

void ToolCallParser::Run() {
  while (true) {
    if (state_ == State::kPlain) {
      content_.append(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
      return;
    }
    if (state_ == State::kObject) {
      while (pos_ < buf_.size() && state_ == State::kObject) StepObjectByte(buf_[pos_]);
      if (state_ == State::kObject) {
        ParsedToolCall& call = calls_.back();
        if (args_start_ != std::string::npos &&
            (buf_[args_start_] == '{' || buf_[args_start_] == '[')) {
          const size_t end = args_end_ != std::string::npos ? args_end_ : pos_;
          call.arguments.assign(buf_, args_start_, end - args_start_);
        }
        return;
      }
      continue;
    }
    if (state_ == State::kListStart || state_ == State::kObjectStart) {
      SkipWs(buf_, &pos_);
      if (pos_ >= buf_.size()) return;
      const char want = state_ == State::kListStart ? '[' : '{';
      if (buf_[pos_] != want) {
        Fail();
        continue;
      }
      if (state_ == State::kListStart) {
        ++pos_;
        state_ = State::kObjectStart;
        continue;
      }
      obj_start_ = pos_;
      depth_ = 0;
      in_string_ = escape_ = false;
      args_start_ = args_end_ = std::string::npos;
      header_done_ = false;
      calls_.emplace_back();
      state_ = State::kObject;
      continue;
    }
    const bool progressed = state_ == State::kText ? StepText() : StepAfterObject();
    if (!progressed) return;
  }
}

bool ToolCallParser::StepText() {
  while (pos_ < buf_.size()) {
    const std::string_view rest = std::string_view(buf_).substr(pos_);
    std::string_view marker = CallMarker(family_);
    if (family_ == ToolFamily::kLlama3 && at_start_) marker = kPythonTag;
    const int m = MatchAt(rest, marker);
    if (m == 0 && !finished_) return false;
    const bool bare = at_start_ && ((family_ == ToolFamily::kLlama3 && rest[0] == '{') ||
                                    (family_ == ToolFamily::kMistral && rest[0] == '['));
    if (m == 1 || bare) {
      // Whitespace before a call is not content.
      pending_ws_ = std::string::npos;
      fail_from_ = pos_;
      if (m == 1) pos_ += marker.size();
      state_ = family_ == ToolFamily::kMistral ? State::kListStart : State::kObjectStart;
      return true;
    }
    if (IsWs(rest[0])) {
      if (pending_ws_ == std::string::npos) pending_ws_ = pos_;
      ++pos_;
      continue;
    }
    // Whitespace right after calls is not content either.
    const size_t from = pending_ws_ != std::string::npos && !calls_.empty() &&
                                after_calls_
                            ? pos_
                        : pending_ws_ != std::string::npos ? pending_ws_
                                                           : pos_;
    after_calls_ = false;
    ++pos_;
    content_.append(buf_, from, pos_ - from);
    pending_ws_ = std::string::npos;
    at_start_ = false;
  }
  return false;
}

bool ToolCallParser::StepAfterObject() {
  SkipWs(buf_, &pos_);
  if (pos_ >= buf_.size()) return false;
  const std::string_view rest = std::string_view(buf_).substr(pos_);
  at_start_ = false;
  switch (family_) {
    case ToolFamily::kHermes: {
      const int m = MatchAt(rest, kHermesClose);
      if (m == 0 && !finished_) return false;
      if (m == 1) pos_ += kHermesClose.size();
      state_ = State::kText;
      after_calls_ = true;
      return true;
    }
    case ToolFamily::kMistral:
      if (rest[0] == ',') {
        ++pos_;
        state_ = State::kObjectStart;
      } else {
        if (rest[0] == ']') ++pos_;
        state_ = State::kText;
        after_calls_ = true;
      }
      return true;
    case ToolFamily::kLlama3:
    case ToolFamily::kNone:
      if (rest[0] == ';') {
        ++pos_;
        state_ = State::kObjectStart;
      } else {
        state_ = State::kText;
        after_calls_ = true;
      }
      return true;
  }
  return true;
}

void ToolCallParser::StepObjectByte(char c) {
  ++pos_;
  if (in_string_) {
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
  } else if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    --depth_;
    if (depth_ == 1 && args_start_ != std::string::npos && args_end_ == std::string::npos) {
      args_end_ = pos_;
    }
    if (depth_ <= 0) {
      CompleteObject();
      return;
    }
  }
  if (!header_done_ && !in_string_) ReadHeader();
}

void ToolCallParser::ReadHeader() {
  const std::string_view s = std::string_view(buf_).substr(obj_start_, pos_ - obj_start_);
  if (s.size() > kMaxHeaderBytes) {
    header_done_ = true;
    return;
  }
  // {"name": "<string>", "arguments": <value...
  size_t i = 1;
  auto give_up = [&] { header_done_ = true; };
  // Skips blanks, then takes `c`: kWait when the text ends first, kNo when another byte comes.
  enum { kTaken, kWait, kNo };
  auto take = [&](char c) {
    SkipWs(s, &i);
    if (i >= s.size()) return kWait;
    if (s[i] != c) return kNo;
    ++i;
    return kTaken;
  };
  SkipWs(s, &i);
  if (i >= s.size()) return;
  constexpr std::string_view kName = "\"name\"";
  const size_t avail = std::min(kName.size(), s.size() - i);
  if (s.substr(i, avail) != kName.substr(0, avail)) return give_up();
  if (avail < kName.size()) return;
  i += 6;
  if (const auto t = take(':'); t != kTaken) return t == kNo ? give_up() : void();
  SkipWs(s, &i);
  if (i >= s.size()) return;
  if (s[i] != '"') return give_up();
  const size_t name_at = i;
  if (!SkipString(s, &i)) return;
  if (calls_.back().name.empty()) {
    nlohmann::json name = nlohmann::json::parse(s.substr(name_at, i - name_at), nullptr, false);
    if (!name.is_string()) return give_up();
    calls_.back().name = name.get<std::string>();
  }
  if (const auto t = take(','); t != kTaken) return t == kNo ? give_up() : void();
  SkipWs(s, &i);
  if (i >= s.size()) return;
  if (s[i] != '"') return give_up();
  const size_t key_at = i;
  if (!SkipString(s, &i)) return;
  const std::string_view key = s.substr(key_at, i - key_at);
  if (key != "\"arguments\"" && key != "\"parameters\"") return give_up();
  if (const auto t = take(':'); t != kTaken) return t == kNo ? give_up() : void();
  SkipWs(s, &i);
  if (i >= s.size()) return;
  args_start_ = obj_start_ + i;
  header_done_ = true;
}

void ToolCallParser::CompleteObject() {
  const std::string_view text = std::string_view(buf_).substr(obj_start_, pos_ - obj_start_);
  const nlohmann::json obj = nlohmann::json::parse(text, nullptr, false);
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string() ||
      obj["name"].get_ref<const std::string&>().empty()) {
    Fail();
    return;
  }
  ParsedToolCall& call = calls_.back();
  call.name = obj["name"].get<std::string>();
  const nlohmann::json* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (obj.contains(key)) args = &obj[key];
  }
  if (args == nullptr) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else if (args_start_ != std::string::npos && args_end_ != std::string::npos) {
    call.arguments.assign(buf_, args_start_, args_end_ - args_start_);
  } else {
    call.arguments = args->dump();
  }
  call.complete = true;
  fail_from_ = pos_;
  state_ = State::kAfterObject;
}

void ToolCallParser::Fail() {
  // The call being read is no call: its text, and everything after it, is content.
  if (!calls_.empty() && !calls_.back().complete) calls_.pop_back();
  content_.append(buf_, fail_from_, std::string::npos);
  pos_ = buf_.size();
  state_ = State::kPlain;
}

}  // namespace banyan::text::tool_calls
