// banyand's configuration: one JSON file (configs/*.json) plus command-line overrides.
//
//   banyand [--config FILE] [--model PATH] [--tokenizer FILE] [--served-model-name NAME]
//           [--backend auto|cpu|cuda] [--attention tpp|paged] [--host ADDR] [--http-port N]
//           [--grpc-port N] [--kv-memory BYTES] [--chunk-size N] [--max-batch N]
//           [--prefill-budget N] [--queue-limit N] [--overlap auto|on|off] [--feed auto|on|off]
//           [--api-key KEY]... [--tenants FILE]
//           [--max-body-bytes N] [--max-prompt-bytes N] [--listen-backlog N]
//           [--chat-template model|plain|llama2|chatml|FILE] [--drain-timeout-ms N]
//           [--log-level LEVEL] [--max-model-len N] [--quantization none|fp8]
//           [--kv-cache-dtype auto|bf16|fp8]
//           [--speculative off|hydra|lookup] [--draft-heads FILE] [--draft-tokens N]
//           [--draft-tree B1,B2,..] [--speculation-max-rows N] [--speculation-min-accept X]
//           [--speculation-adaptive on|off] [--speculation-profile on|off]
//           [--draft-on device|host]
//           [--kv-events-config JSON] [--debug-kv-blocks on|off]
//           [--reasoning-parser qwen3|deepseek_r1|none]
//
// vLLM's names for the same options are accepted too (--port, --max-num-seqs, ...); vLLM
// options with no banyand counterpart are refused, saying so (server/common/option_aliases.h).
//
// Paths in a --config file (model, tokenizer, draft heads, chat template) are relative to the file's folder;
// paths on the command line are relative to the working directory.
//
// With no arguments it serves the bundled stories260K on 127.0.0.1, HTTP 8000, gRPC 50051, on
// the CPU (--backend auto, the default: CUDA when this banyand was built with CUDA and a device
// is visible, else the CPU; banyand logs which and why). JSON keys are the flag names with '_' for '-' (e.g. "http_port"); unknown keys are an
// error, so a typo cannot silently fall back to a default. BYTES accepts K/M/G/T and
// KiB/MiB/GiB/TiB suffixes.
//
// Start-up inputs are checked before anything is opened or allocated:
//   - --config, --tenants and --tokenizer must name regular files, --model a regular file or a
//     folder (Hugging Face); a FIFO, device or socket is refused (reading one blocks forever).
//     Files are followed through symlinks.
//   - JSON files nest at most kMaxJsonDepth (common/json_limits.h) levels.
//   - Ranges: ports 0..65535; max_body_bytes 1 KiB..1 GiB; max_prompt_bytes 1..max_body_bytes
//     (unset: min(1 MiB, max_body_bytes)); listen_backlog 1..65535; kv_memory >= 1 byte (and
//     within the host's or device's free memory: CheckMemoryBudget, run by banyand).
//
// Chat template: "model" (the default) renders with the model's own Jinja template, or with
// "plain" when it has none; plain, llama2 and chatml name a built-in one (server/http/
// chat_template.h) used even when the model has its own; anything else is a Jinja file that
// replaces the model's template (in a config file, relative to that file's folder).
//
// Reasoning models (text/reasoning.h): --reasoning-parser takes vLLM's names, qwen3 or
// deepseek_r1 ("none", the default, turns it off); any other name is refused, listing them.
//
// Tenants (server/common/auth.h). The config file's "tenants" (or the file --tenants names, which
// replaces it) is a list of
//   {"name": "alice", "keys": ["sk-..."], "max_concurrent_requests": 8, "max_kv_chunks": 0}
// (the limits optional, 0 = unlimited). Keys given with
// --api-key / "api_keys" belong to the tenant "default" (declared in "tenants" or not): they
// all share one prefix-cache namespace, so give clients that must not share one their own
// tenant. --api-key flags replace the file's "api_keys". No key anywhere: one open tenant,
// "default".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/kv_events_config.h"
#include "server/common/server_context.h"

namespace banyan::server {

// Prompt lookup's n-gram sizes when not given (--prompt-lookup-min / -max).
inline constexpr int kDefaultPromptLookupMin = 2;
inline constexpr int kDefaultPromptLookupMax = 0;  // off (ngram_lookup.h says why)

struct DaemonConfig {
  std::string model;  // empty: the bundled model
  std::string tokenizer;
  std::string served_model_name;  // empty: derived from the model path
  std::string backend = "auto";  // "auto" is resolved by banyand (server/common/backend_choice.h)
  std::string attention = "tpp";
  // --cpu-threads N: the CPU backend's BLAS threads; 0 (the default) picks them by the model's
  // size (engine::CpuBackend::AutoThreads: one for toy models, else OpenBLAS's default).
  int cpu_threads = 0;
  int64_t kv_memory_bytes = int64_t{256} << 20;
  bool kv_memory_given = false;  // --kv-memory was set (command line or config file)
  // vLLM's --gpu-memory-utilization F, 0 < F <= 1: the share of the GPU's memory this process
  // may hold, weights and workspace included; the KV cache gets what remains of it after the
  // weights (--backend cuda only; exclusive with --kv-memory). 0: unset.
  double gpu_memory_utilization = 0;
  int chunk_size = 64;
  int max_batch = 256;        // sequences decoded per iteration
  int prefill_budget = 2048;  // prompt tokens per iteration
  int queue_limit = 256;
  int max_model_len = 0;  // context limit, tokens; 0: the model's. Above the model's: refused
  // vLLM's --quantization: "fp8" quantizes an unquantized model's projections to FP8 at load
  // (model::QuantizeWeightsFp8); "none" (the default) runs the weights as stored. FP8
  // checkpoints load as FP8 either way.
  std::string quantization = "none";
  // vLLM's --kv-cache-dtype: "auto" and "bf16" keep K and V in the model's dtype; "fp8" (or
  // "fp8_e4m3") in FP8 with a power-of-two scale per token and head (kernels/kv_fp8.h), about
  // half the bytes, so --kv-memory holds about twice the tokens. The CPU backend keeps fp32 and
  // rounds each K / V row as the FP8 cache would (the reference).
  std::string kv_cache_dtype = "auto";
  // The CPU a step ahead (scheduler/engine_loop.h): "auto" (on where the backend launches
  // asynchronously: the GPU), "on", "off".
  std::string overlap = "auto";
  std::string feed = "auto";  // fed steps (LoopOptions::feed)
  // Speculative decoding (scheduler/engine_loop.h, LoopOptions::Speculation): "off", "hydra"
  // (draft heads from draft_heads, a head set's config.json) or "lookup" (a repeated greedy
  // request's own earlier continuation, else where the context's last prompt_lookup_min to
  // prompt_lookup_max tokens occurred before in it; max 0: the continuation alone);
  // draft_tokens candidates per chain, or (hydra) a tree
  // with draft_tree children per node at each depth ("4,2,2"); only in steps with at most
  // speculation_max_rows decode rows, and not for a sample whose accepted candidates per step
  // fall below speculation_min_accept.
  // --deterministic on|off: a request's tokens and logprobs bit for bit the same in any batch
  // as alone, with or without speculation (the CPU backend: row-invariant products and paged
  // attention; the CUDA backend: InvariantGemm and InvariantAttention; docs/deployment.md).
  std::string deterministic = "off";
  std::string speculative = "off";
  std::string draft_heads;
  int draft_tokens = 3;
  int prompt_lookup_min = kDefaultPromptLookupMin;
  int prompt_lookup_max = kDefaultPromptLookupMax;
  std::vector<int> draft_tree;
  int speculation_max_rows = 64;
  std::string speculation_adaptive = "on";  // LoopOptions::speculation_adaptive: "on" / "off"
  // With speculation_adaptive: profile a step's cost with candidates and without at start-up
  // (EngineLoop::ProfileSpeculation), so that the governor is right from the first step.
  std::string speculation_profile = "on";
  std::string draft_on = "device";  // LoopOptions::draft_on_host: "device" / "host"
  float speculation_min_accept = 0.1f;
  std::string log_level = "info";
  // KV-cache events for prefix-aware routers (server/common/kv_events_config.h): off by default. In a
  // config file, "kv_events_config" is the JSON object itself (or its text).
  KvEventsConfig kv_events;
  ServerOptions server;
  // As set by --max-prompt-bytes / "max_prompt_bytes"; LoadDaemonConfig resolves
  // server.max_prompt_bytes from it.
  std::optional<int64_t> max_prompt_bytes;
};

// Parses "--flag value" / "--flag=value" arguments over the config file named by --config (if
// any) over the defaults. InvalidArgument names the bad flag or key.
absl::StatusOr<DaemonConfig> LoadDaemonConfig(int argc, char** argv);

// "512MiB" -> 536870912. InvalidArgument for anything else than a number with an optional
// K/M/G/T (x1000) or KiB/MiB/GiB/TiB (x1024) suffix.
absl::StatusOr<int64_t> ParseBytes(std::string_view text);

// Memory budgets against what the machine has. `available` in bytes; `where` names it in the
// message ("host (MemAvailable)", "GPU 0"). ResourceExhausted naming `what` (the flag) when the
// budget is larger.
absl::Status CheckMemoryBudget(std::string_view what, int64_t budget_bytes,
                               int64_t available_bytes, std::string_view where);
// MemAvailable of /proc/meminfo text, in bytes.
absl::StatusOr<int64_t> ParseMemAvailable(std::string_view meminfo);
// This host's available memory: /proc/meminfo MemAvailable, else sysconf's free pages.
absl::StatusOr<int64_t> AvailableHostMemoryBytes();

}  // namespace banyan::server
