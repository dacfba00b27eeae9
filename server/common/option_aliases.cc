#include "server/common/option_aliases.h"

#include "absl/strings/str_cat.h"

namespace banyan::server {
namespace {

struct Alias {
  std::string_view vllm;
  std::string_view banyan;
};
constexpr Alias kAliases[] = {
    {"port", "http-port"},
    {"max-num-seqs", "max-batch"},
    {"block-size", "chunk-size"},
};

constexpr std::string_view kAcceptedSwitches[] = {"enable-prefix-caching",
                                                  "enable-chunked-prefill"};

// vLLM options with no banyand counterpart, and what to use instead ("" when nothing).
struct Unmapped {
  std::string_view vllm;
  bool is_switch;
  std::string_view instead;
};
constexpr Unmapped kUnmapped[] = {
    {"max-num-batched-tokens", false,
     "--prefill-budget N limits the prompt tokens prefilled per step (decode rows are not "
     "counted)"},
    {"swap-space", false, "banyand preempts by recomputing, not by swapping to host memory"},
    {"cpu-offload-gb", false, ""},
    {"dtype", false, "banyand picks the dtype from the backend and the checkpoint"},
    {"tensor-parallel-size", false, "banyand runs one GPU per process"},
    {"pipeline-parallel-size", false, "banyand runs one GPU per process"},
    {"data-parallel-size", false, "run one banyand per GPU behind a load balancer"},
    {"distributed-executor-backend", false, ""},
    {"seed", false, "send a per-request \"seed\" instead"},
    {"max-logprobs", false, ""},
    {"download-dir", false, "banyand does not download: --model takes a local path"},
    {"load-format", false, "the format is found from --model (Hugging Face folder, .gguf, .bin)"},
    {"revision", false, "banyand does not download: --model takes a local path"},
    {"tokenizer-mode", false, ""},
    {"hf-token", false, "banyand does not download: --model takes a local path"},
    {"uvicorn-log-level", false, "--log-level trace|debug|info|warn|error"},
    {"ssl-keyfile", false, "terminate TLS in front of banyand (ingress or proxy)"},
    {"ssl-certfile", false, "terminate TLS in front of banyand (ingress or proxy)"},
    {"root-path", false, ""},
    {"allowed-origins", false, ""},
    {"lora-modules", false, ""},
    {"max-loras", false, ""},
    {"speculative-config", false, ""},
    {"generation-config", false, ""},
    {"guided-decoding-backend", false, ""},
    {"tool-call-parser", false, ""},
    {"trust-remote-code", true, "banyand runs no model code: LLaMA-family weights only"},
    {"no-enable-prefix-caching", true, "the prefix cache is how banyand works; it cannot be "
                                       "turned off"},
    {"enforce-eager", true, ""},
    {"disable-log-requests", true, "--log-level warn hides the per-request lines"},
    {"disable-log-stats", true, ""},
    {"enable-lora", true, ""},
    {"enable-auto-tool-choice", true, ""},
    {"disable-custom-all-reduce", true, ""},
    {"disable-frontend-multiprocessing", true, ""},
};

const Unmapped* FindUnmapped(std::string_view name) {
  for (const Unmapped& u : kUnmapped) {
    if (u.vllm == name) return &u;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::string> CanonicalOptionName(std::string_view name) {
  for (const Alias& a : kAliases) {
    if (a.vllm == name) return std::string(a.banyan);
  }
  if (IsAcceptedSwitch(name)) return std::string(name);
  if (const Unmapped* u = FindUnmapped(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(name), ": vLLM's option has no banyand counterpart",
        u->instead.empty() ? "" : "; ", std::string(u->instead),
        " (banyand --help lists its options)"));
  }
  return std::string(name);
}

bool IsVllmSwitch(std::string_view name) {
  if (IsAcceptedSwitch(name)) return true;
  const Unmapped* u = FindUnmapped(name);
  return u != nullptr && u->is_switch;
}

bool IsAcceptedSwitch(std::string_view name) {
  for (std::string_view s : kAcceptedSwitches) {
    if (s == name) return true;
  }
  return false;
}

}  // namespace banyan::server
