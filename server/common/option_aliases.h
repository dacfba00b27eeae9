// vLLM's option names on banyand's command line and in its config file (server/common/config.h).
//
// Users arrive with vLLM's spelling in their scripts and manifests. Where a vLLM option means
// what one of banyand's means, its name is accepted as an alias of banyand's:
//
//   --port N                    --http-port N
//   --max-num-seqs N            --max-batch N        (sequences decoded per step)
//   --block-size N              --chunk-size N       (tokens per KV block; banyand: 16..256)
//   --enable-prefix-caching     accepted, no value: banyand always caches prefixes
//   --enable-chunked-prefill    accepted, no value: banyand always chunks prefills
//
// --host, --model, --tokenizer, --served-model-name, --api-key and --max-model-len are
// banyand's own names too. Every other vLLM option is refused with a message that says it has
// no banyand counterpart and, where there is a near one, which to use instead (for example
// --max-num-batched-tokens: --prefill-budget). vLLM options that
// take no value (--trust-remote-code, --enforce-eager, ...) are recognised as such, so the
// message names them and not the option that follows.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace banyan::server {

// The banyand option `name` (without "--", '-' separated) stands for: banyand's own names and
// unknown names come back unchanged (the caller reports unknown ones), vLLM aliases mapped.
// InvalidArgument, naming the option, for a vLLM option banyand does not have.
absl::StatusOr<std::string> CanonicalOptionName(std::string_view name);

// True for the vLLM options that take no value (switches), accepted or not.
bool IsVllmSwitch(std::string_view name);

// True for a switch CanonicalOptionName accepts (what it asks for is what banyand always does).
bool IsAcceptedSwitch(std::string_view name);

}  // namespace banyan::server
