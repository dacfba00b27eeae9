// banyand's configuration: one JSON file (configs/*.json) plus command-line overrides.
//
//   banyand [--config FILE] [--model PATH] [--tokenizer FILE] [--served-model-name NAME]
//           [--backend cpu|cuda] [--attention tpp|paged] [--host ADDR] [--http-port N]
//           [--grpc-port N] [--kv-memory BYTES] [--chunk-size N] [--max-batch N]
//           [--prefill-budget N] [--queue-limit N] [--api-key KEY]... [--max-body-bytes N]
//           [--chat-template plain|llama2|chatml] [--drain-timeout-ms N] [--log-level LEVEL]
//
// With no arguments it serves the bundled stories260K on 127.0.0.1, HTTP 8000, gRPC 50051, on
// the CPU. JSON keys are the flag names with '_' for '-' (e.g. "http_port"); unknown keys are an
// error, so a typo cannot silently fall back to a default. BYTES accepts K/M/G/KiB/MiB/GiB
// suffixes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/server_context.h"

namespace banyan::server {

struct DaemonConfig {
  std::string model;  // empty: the bundled model
  std::string tokenizer;
  std::string served_model_name;  // empty: derived from the model path
  std::string backend = "cpu";
  std::string attention = "tpp";
  int64_t kv_memory_bytes = int64_t{256} << 20;
  int chunk_size = 64;
  int max_batch = 256;        // sequences decoded per iteration
  int prefill_budget = 2048;  // prompt tokens per iteration
  int queue_limit = 256;
  std::string log_level = "info";
  ServerOptions server;
};

// Parses "--flag value" / "--flag=value" arguments over the config file named by --config (if
// any) over the defaults. InvalidArgument names the bad flag or key.
absl::StatusOr<DaemonConfig> LoadDaemonConfig(int argc, char** argv);

// "512MiB" -> 536870912. InvalidArgument for anything else than a number with an optional
// K/M/G/T (x1000) or KiB/MiB/GiB/TiB (x1024) suffix.
absl::StatusOr<int64_t> ParseBytes(std::string_view text);

}  // namespace banyan::server
