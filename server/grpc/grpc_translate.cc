#include "server/grpc/grpc_translate.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "common/json_limits.h"
#include "server/common/structured_outputs.h"
#include "server/common/tool_calling.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

// A process-unique id: a random per-process prefix (ids stay distinct across restarts) and a
// counter.
std::string NewRequestId() {
  static const uint32_t process_tag = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  return absl::StrFormat("grpc-%08x-%d", process_tag, counter.fetch_add(1) + 1);
}

engine::SamplingParams ToSamplingParams(const v1::SamplingParams& s) {
  engine::SamplingParams p;
  p.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  p.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  p.top_k = s.top_k();
  p.min_p = s.min_p();
  p.repetition_penalty = s.has_repetition_penalty() ? s.repetition_penalty() : 1.0f;
  p.frequency_penalty = s.frequency_penalty();
  p.presence_penalty = s.presence_penalty();
  p.has_seed = s.has_seed();
  p.seed = s.seed();
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.ignore_eos = s.ignore_eos();
  p.logprobs = s.has_logprobs() ? s.logprobs() : 0;
  p.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  p.min_tokens = s.min_tokens();
  std::sort(p.logit_bias.begin(), p.logit_bias.end());  // a map's ids are distinct
  return p;
}

// The dotted path of the first string field in `wire` (a `desc` message) that is not UTF-8, and
// the offset of the bad bytes in it; "" when there is none. Walks the wire format without the
// schema's UTF-8 check: every field of a message parsed as an UnknownFieldSet is kept raw.
std::string FindBadUtf8(std::string_view wire, const google::protobuf::Descriptor& desc,
                        const std::string& prefix, size_t* bad_offset, int depth = 0) {
  google::protobuf::UnknownFieldSet fields;
  if (depth > 16 || !fields.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) return "";
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* fd = desc.FindFieldByNumber(f.number());
    if (fd == nullptr) continue;
    const std::string& bytes = f.length_delimited();
    const std::string path = prefix + fd->name();
    if (fd->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
        !IsValidUtf8(bytes, bad_offset)) {
      return path;
    }
    if (fd->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      std::string bad = FindBadUtf8(bytes, *fd->message_type(), path + ".", bad_offset, depth + 1);
      if (!bad.empty()) return bad;
    }
  }
  return "";
}

// The constraint json_schema, regex, choice, grammar, json_object or structural_tag asks for;
// nullopt: none. Two set are
// refused before either is read, naming the later field and the earlier.
absl::StatusOr<std::optional<StructuredOutputSpec>> StructuredOutputOf(
    const v1::GenerateRequest& req) {
  std::vector<std::string_view> set;
  if (req.has_json_schema()) set.push_back("json_schema");
  if (req.has_regex()) set.push_back("regex");
  if (req.has_choice()) set.push_back("choice");
  if (req.has_grammar()) set.push_back("grammar");
  if (req.json_object()) set.push_back("json_object");
  if (req.has_structural_tag()) set.push_back("structural_tag");
  if (set.empty()) return std::nullopt;
  if (set.size() > 1) return BothConstrainError(set[1], set[0]);
  absl::StatusOr<StructuredOutputSpec> spec;
  if (req.has_json_schema()) {
    spec = JsonSchemaSpecFromText(req.json_schema(), "json_schema");
  } else if (req.has_regex()) {
    spec = RegexSpec(req.regex(), "regex");
  } else if (req.has_choice()) {
    spec = ChoiceSpec({req.choice().values().begin(), req.choice().values().end()}, "choice");
  } else if (req.has_grammar()) {
    spec = GrammarSpec(req.grammar(), "grammar");
  } else if (req.has_structural_tag()) {
    spec = StructuralTagSpecFromText(req.structural_tag(), "structural_tag");
  } else {
    spec = StructuredOutputSpec::JsonObject("json_object");
  }
  if (!spec.ok()) return spec.status();
  return std::optional<StructuredOutputSpec>(*std::move(spec));
}

// tools / tool_choice / parallel_tool_calls as the body of an HTTP chat request would carry them
// (keys in the order sent: a schema's properties are generated in its order), for the shared
// ParseToolFields. A tool's parameters are JSON text here; text that is no JSON is refused
// naming tools[i].function.parameters.
absl::StatusOr<nlohmann::ordered_json> ToolFieldsAsJson(const v1::GenerateRequest& req) {
  using OJson = nlohmann::ordered_json;
  OJson body = OJson::object();
  if (req.tools_size() > 0) {
    if (static_cast<size_t>(req.tools_size()) > kMaxTools) {
      return InvalidParam("tools",
                          absl::StrCat("at most ", kMaxTools, " tools, got ", req.tools_size()));
    }
    OJson tools = OJson::array();
    for (int i = 0; i < req.tools_size(); ++i) {
      const v1::Tool& t = req.tools(i);
      OJson fn = {{"name", t.function().name()}};
      if (t.function().has_parameters()) {
        const std::string field = absl::StrCat("tools[", i, "].function.parameters");
        const std::string& text = t.function().parameters();
        if (text.size() > kMaxToolsBytes) {
          return InvalidParam("tools", absl::StrCat("the tools take more than ", kMaxToolsBytes,
                                                    " bytes as JSON"));
        }
        absl::StatusOr<OJson> params = ParseOrderedJson(
            text, field, JsonLimits{.max_depth = kMaxJsonDepth, .max_bytes = text.size()});
        if (!params.ok()) return InvalidParam(field, std::string(params.status().message()));
        fn["parameters"] = *std::move(params);
      }
      OJson tool = {{"function", std::move(fn)}};
      if (!t.type().empty()) tool["type"] = t.type();
      tools.push_back(std::move(tool));
    }
    body["tools"] = std::move(tools);
  }
  switch (req.tool_choice().choice_case()) {
    case v1::ToolChoice::kMode:
      body["tool_choice"] = req.tool_choice().mode();
      break;
    case v1::ToolChoice::kFunction:
      body["tool_choice"] = {{"type", "function"},
                             {"function", {{"name", req.tool_choice().function().name()}}}};
      break;
    case v1::ToolChoice::CHOICE_NOT_SET:
      break;
  }
  if (req.has_parallel_tool_calls()) body["parallel_tool_calls"] = req.parallel_tool_calls();
  return body;
}

}  // namespace

absl::Status ParseRequest(std::string_view wire, google::protobuf::Message* msg) {
  if (msg->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) return absl::OkStatus();
  size_t bad_offset = 0;
  const std::string bad = FindBadUtf8(wire, *msg->GetDescriptor(), "", &bad_offset);
  if (!bad.empty()) {
    return InvalidParam(bad, absl::StrCat(bad, " is not valid UTF-8 (bad byte sequence at offset ",
                                          bad_offset, "); string fields must be UTF-8"));
  }
  return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ",
                                                 msg->GetDescriptor()->full_name(), " message (",
                                                 wire.size(), " bytes)"));
}

absl::StatusOr<std::string> ResolveRequestId(std::string_view client_id) {
  if (client_id.empty()) return NewRequestId();
  bool ok = client_id.size() <= kMaxRequestIdChars;
  for (char c : client_id) ok = ok && IsIdChar(c);
  if (!ok) {
    return InvalidParam("request_id",
                        absl::StrCat("request_id must be at most ", kMaxRequestIdChars,
                                     " characters from [A-Za-z0-9._:-]"));
  }
  return std::string(client_id);
}

absl::Status CheckModel(std::string_view requested, const ServerContext& ctx) {
  if (requested.empty() || requested == ctx.model_name) return absl::OkStatus();
  absl::Status s = absl::NotFoundError(absl::StrCat(
      "model '", Sv(requested), "' does not exist; this server serves '", ctx.model_name, "'"));
  SetStatusParam(&s, "model");
  return s;
}

absl::StatusOr<std::vector<int32_t>> TokenizeText(std::string_view text, bool add_bos,
                                                  const text::Tokenizer& tokenizer) {
  // protobuf already rejects a `string` field that is not UTF-8 (see GenerationService), so
  // this guards callers that got their text elsewhere.
  size_t bad_offset = 0;
  if (!IsValidUtf8(text, &bad_offset)) {
    return InvalidParam("text", absl::StrCat("text is not valid UTF-8 (bad byte sequence at "
                                             "offset ",
                                             bad_offset, ")"));
  }
  return tokenizer.Encode(text, add_bos);
}

absl::StatusOr<scheduler::Request> ToSchedulerRequest(const v1::GenerateRequest& req,
                                                      const ServerContext& ctx, std::string id,
                                                      std::string_view tenant,
                                                      text::tool_calls::ToolFamily* tool_family) {
  if (tool_family != nullptr) *tool_family = text::tool_calls::ToolFamily::kNone;
  if (absl::Status s = CheckModel(req.model(), ctx); !s.ok()) return s;
  if (req.user().size() > kMaxTenantFieldBytes) {
    return InvalidParam("user", absl::StrCat("user is ", req.user().size(),
                                             " bytes long; the limit is ", kMaxTenantFieldBytes));
  }
  if (req.cache_salt().size() > kMaxTenantFieldBytes) {
    return InvalidParam("cache_salt",
                        absl::StrCat("cache_salt is ", req.cache_salt().size(),
                                     " bytes long; the limit is ", kMaxTenantFieldBytes));
  }

  GenerationInput in;
  switch (req.input_case()) {
    case v1::GenerateRequest::kText: {
      if (req.text().empty()) {
        return InvalidParam("text", "the prompt is empty; send at least one token of text");
      }
      if (absl::Status s = CheckPromptBytes(req.text(), ctx.options, "text"); !s.ok()) return s;
      absl::StatusOr<std::vector<int32_t>> ids =
          TokenizeText(req.text(), !req.has_add_bos() || req.add_bos(), *ctx.tokenizer);
      if (!ids.ok()) return ids.status();
      in.prompt = *std::move(ids);
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      if (req.token_ids().ids().empty()) {
        return InvalidParam("token_ids", "the prompt is empty; send at least one token id");
      }
      in.prompt.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      break;
    case v1::GenerateRequest::INPUT_NOT_SET:
      return InvalidParam("input", "the prompt is missing; set either text or token_ids");
  }

  const v1::SamplingParams& s = req.sampling();
  in.params = ToSamplingParams(s);
  if (s.has_max_tokens()) in.max_tokens = s.max_tokens();
  in.n = s.has_n() ? s.n() : 1;
  in.stop.assign(s.stop().begin(), s.stop().end());
  in.priority = req.priority();
  in.tenant = std::string(tenant);
  in.user = req.user();
  in.cache_salt = req.cache_salt();
  // Compiled here, on the gRPC handler's thread, through the server's cache.
  absl::StatusOr<std::optional<StructuredOutputSpec>> spec = StructuredOutputOf(req);
  if (!spec.ok()) return spec.status();
  if (spec->has_value()) {
    auto constraint = CompileStructuredOutput(ctx.structured_outputs.get(), **spec);
    if (!constraint.ok()) return constraint.status();
    in.constraint = *std::move(constraint);
  }
  if (req.tools_size() > 0 || req.has_tool_choice() || req.has_parallel_tool_calls()) {
    absl::StatusOr<nlohmann::ordered_json> fields = ToolFieldsAsJson(req);
    if (!fields.ok()) return fields.status();
    const text::tool_calls::ToolFamily family = ctx.jinja_chat != nullptr
                                                    ? ctx.jinja_chat->tool_family
                                                    : text::tool_calls::ToolFamily::kNone;
    absl::StatusOr<std::optional<ToolRequest>> tools = ParseToolFields(*fields, family);
    if (!tools.ok()) return tools.status();
    if (tools->has_value()) {
      if (absl::Status s = AddToolConstraint(ctx.tool_calling.get(), **tools, family,
                                             &in.constraint);
          !s.ok()) {
        return s;
      }
      if (tool_family != nullptr) *tool_family = family;
    }
  }

  const ModelLimits limits{.context_tokens = ctx.model_config->max_seq_len,
                           .vocab_size = ctx.model_config->vocab_size,
                           .max_n = ctx.options.max_n};
  return BuildRequest(std::move(in), limits, kGrpcDefaultMaxTokens, std::move(id));
}

v1::FinishReason ToProto(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
    case scheduler::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case scheduler::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case scheduler::FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case scheduler::FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void ToProto(const scheduler::Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_completion_tokens(usage.completion_tokens);
  out->set_cached_prompt_tokens(usage.cached_prompt_tokens);
}

void ToolCallReader::Apply(v1::GenerateResponse* out) {
  for (v1::Choice& c : *out->mutable_choices()) {
    const size_t index = static_cast<size_t>(c.index());
    if (index >= choices_.size()) choices_.resize(index + 1);
    if (choices_[index] == nullptr) {
      choices_[index] = std::make_unique<PerChoice>(PerChoice{
          .parser = text::tool_calls::ToolCallParser(family_),
          .content_sent = 0, .calls_sent = 0, .made_calls = false});
    }
    PerChoice& pc = *choices_[index];
    pc.parser.Feed(c.text());
    const bool finished = c.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    if (finished) pc.parser.Finish();
    const std::string& content = pc.parser.content();
    c.set_text(content.substr(pc.content_sent));
    pc.content_sent = content.size();
    const auto& calls = pc.parser.calls();
    while (pc.calls_sent < calls.size() && calls[pc.calls_sent].complete) {
      const text::tool_calls::ParsedToolCall& call = calls[pc.calls_sent++];
      v1::ToolCall* tc = c.add_tool_calls();
      tc->set_id(NewToolCallId());
      tc->set_name(call.name);
      tc->set_arguments(call.arguments);
      pc.made_calls = true;
    }
    if (finished && pc.made_calls && c.finish_reason() == v1::FINISH_REASON_STOP) {
      c.set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
    }
  }
}

void AppendEvents(std::span<const scheduler::TokenEvent> events, bool with_logprobs,
                  v1::GenerateResponse* out) {
  for (const scheduler::TokenEvent& e : events) {
    // n <= max_n (16): a linear search beats any index.
    v1::Choice* choice = nullptr;
    for (v1::Choice& c : *out->mutable_choices()) {
      if (c.index() == e.sample) choice = &c;
    }
    if (choice == nullptr) {
      choice = out->add_choices();
      choice->set_index(e.sample);
    }
    if (e.token >= 0) {
      choice->add_token_ids(e.token);
      if (with_logprobs) {
        v1::StepLogprobs* step = choice->add_logprobs();
        step->mutable_token()->set_token_id(e.token);
        step->mutable_token()->set_logprob(e.logprob);
        for (const auto& [id, lp] : e.top_logprobs) {
          v1::TokenLogprob* top = step->add_top();
          top->set_token_id(id);
          top->set_logprob(lp);
        }
      }
    }
    choice->mutable_text()->append(e.text);
    if (e.finish != scheduler::FinishReason::kNone) choice->set_finish_reason(ToProto(e.finish));
  }
}

}  // namespace banyan::server
