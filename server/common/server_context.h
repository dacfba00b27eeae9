// What the front ends (HTTP, gRPC) share: the scheduler they submit to, the tokenizer for
// text <-> ids, the model's identity and limits, and the operational settings.
//
// Front ends only translate between their wire format and scheduler::Request / TokenEvent.
// Request validation helpers shared by both live in server/common/validation.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "text/chat_template.h"
#include "text/reasoning.h"
#include "text/tokenizer/tokenizer.h"
#include "scheduler/scheduler.h"
#include "server/common/auth.h"
#include "server/common/structured_outputs.h"
#include "server/common/tool_calling.h"
#include "server/common/rejections.h"

namespace banyan::server {


// Operational settings; banyand fills them from its config (server/common/config.h checks ranges).
struct ServerOptions {
  std::string host = "127.0.0.1";
  int http_port = 8000;
  int grpc_port = 50051;
  // Tenants and their keys (server/common/auth.h); ServerContext::auth is built from them. Keys given
  // as --api-key / "api_keys" are the tenant "default"'s.
  std::vector<TenantSpec> tenants;
  // Every key of every tenant (filled by the config; a start-up cross-check against
  // ServerContext::auth). The front ends authenticate with ServerContext::auth only.
  std::vector<std::string> api_keys;
  int64_t max_body_bytes = 8 << 20;            // larger HTTP bodies: 413; gRPC messages too
  // Largest prompt text in bytes, checked before tokenizing (CheckPromptBytes); 1 MiB holds a
  // 128K-token context of ordinary text (~4 bytes a token) twice, and stays within the body
  // limit. Unset in the config, it is min(1 MiB, max_body_bytes).
  int64_t max_prompt_bytes = 1 << 20;
  int max_n = 16;                              // largest `n` accepted
  text::ChatTemplate chat_template = text::ChatTemplate::kModel;
  // --chat-template FILE: a Jinja template that replaces the model's (empty: none).
  std::string chat_template_file;
  int drain_timeout_ms = 30000;                // SIGTERM: running requests get this long
  int listen_backlog = 1024;                   // pending connections the kernel queues (1..65535)
  // GET /debug/kv_blocks: the prefix cache's full blocks (hashes only, no tokens), for checking
  // a KV event stream against the daemon. Off unless --debug-kv-blocks on.
  bool debug_kv_blocks = false;
  // --reasoning-parser (text/reasoning.h): chat outputs are split into message.reasoning_content
  // and message.content, and a structured output holds only after "</think>". kNone: off.
  text::ReasoningParser reasoning_parser = text::ReasoningParser::kNone;
};

struct ServerContext {
  std::string model_name;  // the id /v1/models lists and requests must name
  const model::ModelConfig* model_config = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  scheduler::Scheduler* scheduler = nullptr;
  ServerOptions options;
  // The Jinja chat template prompts are rendered with (the model's own or the --chat-template
  // file); null: the built-in options.chat_template.
  std::shared_ptr<const text::JinjaChat> jinja_chat;
  // Who may call, as which tenant. The default: no key, one tenant "default".
  Auth auth;
  // True once serving; false while loading or draining (/ready answers 503, gRPC health is
  // NOT_SERVING, new requests are refused). Null means always ready (tests).
  std::atomic<bool>* ready = nullptr;
  // Compiles response_format / guided_json schemas for the model's vocabulary, with its cache.
  // Null: structured outputs are refused with a 400.
  std::shared_ptr<StructuredOutputs> structured_outputs;
  // Compiles the grammars that force tool calls (tool_choice required / named). Null: tools
  // are refused unless tool_choice is "none".
  std::shared_ptr<ToolCalling> tool_calling;
  // Requests turned away, by reason and tenant (server/common/rejections.h); shared by both front ends
  // and by copies of the context.
  std::shared_ptr<RejectionCounters> rejections = std::make_shared<RejectionCounters>();
  // More /metrics text from parts the front ends do not know (the KV event publisher's
  // counters), appended to the body; null: none. Any thread.
  std::function<std::string()> extra_metrics;
};

}  // namespace banyan::server
