#include "server/common/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "engine/speculative/draft_heads.h"
#include "nlohmann/json.hpp"
#include "server/common/auth.h"
#include "server/common/option_aliases.h"
#include "text/reasoning.h"

namespace banyan::server {
namespace {

constexpr int64_t kMinBodyBytes = 1024;
constexpr int64_t kMaxBodyBytes = int64_t{1} << 30;
constexpr int64_t kDefaultMaxPromptBytes = int64_t{1} << 20;
constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;

// Whether `path` (followed through symlinks) is a regular file, or a folder when `allow_dir`.
absl::Status CheckInputPath(const char* what, const std::string& path, bool allow_dir) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path, " (does it exist?)"));
  }
  if (S_ISREG(st.st_mode) || (allow_dir && S_ISDIR(st.st_mode))) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", path, " is not a regular file", allow_dir ? " or a folder" : "",
                   " (a FIFO, device or socket would block or never end)"));
}

// The bytes of a small regular file, opened without blocking (a FIFO would block the open)
// and checked to be a regular file before reading.
absl::StatusOr<std::string> ReadRegularFile(const char* what, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", path, " is not a regular file (a FIFO, device or socket would "
                                       "block or never end)"));
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigFileBytes) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is larger than ",
                                                     kMaxConfigFileBytes, " bytes"));
    }
  }
  close(fd);
  return text;
}

// A JSON file's DOM, within common/json_limits.h's depth limit and kMaxConfigFileBytes.
absl::StatusOr<nlohmann::json> ReadConfigJson(const char* what, const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(what, path);
  if (!text.ok()) return text.status();
  return ParseJson(*text, path, JsonLimits{.max_depth = kMaxJsonDepth,
                                           .max_bytes = kMaxConfigFileBytes});
}

// The "tenants" list (server/common/auth.h for the meaning). `where` prefixes messages.
absl::StatusOr<std::vector<TenantSpec>> ParseTenants(const nlohmann::json& j,
                                                     const std::string& where) {
  if (!j.is_array()) {
    return absl::InvalidArgumentError(where + ": tenants must be a list of {\"name\", \"keys\", "
                                              "...} objects");
  }
  std::vector<TenantSpec> out;
  for (const nlohmann::json& t : j) {
    const std::string at = absl::StrCat(where, ": tenants[", out.size(), "]");
    if (!t.is_object()) return absl::InvalidArgumentError(at + " must be an object");
    TenantSpec spec;
    for (const auto& [k, v] : t.items()) {
      if (k == "name" && v.is_string()) {
        spec.name = v.get<std::string>();
      } else if (k == "keys" && v.is_array()) {
        for (const nlohmann::json& key : v) {
          if (!key.is_string()) return absl::InvalidArgumentError(at + ".keys must be strings");
          spec.keys.push_back(key.get<std::string>());
        }
      } else if ((k == "max_concurrent_requests" || k == "max_kv_chunks") &&
                 v.is_number_integer()) {
        const int64_t limit = v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 40)
                                  ? -1
                                  : v.get<int64_t>();
        const int64_t max = k == "max_kv_chunks" ? int64_t{1} << 30 : int64_t{1} << 20;
        if (limit < 0 || limit > max) {
          return absl::InvalidArgumentError(
              absl::StrCat(at, ".", k, ": expected an integer in [0, ", max, "]"));
        }
        if (k == "max_kv_chunks") {
          spec.max_kv_chunks = limit;
        } else {
          spec.max_concurrent_requests = static_cast<int>(limit);
        }
      } else if (k == "name" || k == "keys" || k == "max_concurrent_requests" ||
                 k == "max_kv_chunks") {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".", k, " has the wrong type (name: string, keys: list of strings, limits: "
                        "integers)"));
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": unknown key '", k.substr(0, 64),
            "' (name, keys, max_concurrent_requests, max_kv_chunks)"));
      }
    }
    out.push_back(std::move(spec));
  }
  if (absl::Status s = ValidateTenantSpecs(out); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  return out;
}

using Setter = absl::Status (*)(DaemonConfig&, const std::string&);

absl::Status Bytes(const std::string& key, const std::string& v, int64_t lo, int64_t hi,
                   int64_t* out) {
  absl::StatusOr<int64_t> b = ParseBytes(v);
  if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat(key, ": ", b.status().message()));
  if (*b < lo || *b > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a byte count in [", lo, ", ", hi, "], got '", v, "'"));
  }
  *out = *b;
  return absl::OkStatus();
}

absl::Status Int(const std::string& key, const std::string& v, int lo, int hi, int* out) {
  int x;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected an integer in [", lo, ", ", hi, "], got '", v, "'"));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status Float(const std::string& key, const std::string& v, float lo, float hi, float* out) {
  float x;
  if (!absl::SimpleAtof(v, &x) || !(x >= lo && x <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a number in [", lo, ", ", hi, "], got '", v, "'"));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status OneOf(const std::string& key, const std::string& v,
                   std::initializer_list<const char*> allowed, std::string* out) {
  for (const char* a : allowed) {
    if (v == a) {
      *out = v;
      return absl::OkStatus();
    }
  }
  std::string list;
  for (const char* a : allowed) absl::StrAppend(&list, list.empty() ? "" : "|", a);
  return absl::InvalidArgumentError(absl::StrCat(key, ": expected ", list, ", got '", v, "'"));
}

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"model", [](DaemonConfig& c, const std::string& v) { c.model = v; return absl::OkStatus(); }},
      {"tokenizer",
       [](DaemonConfig& c, const std::string& v) { c.tokenizer = v; return absl::OkStatus(); }},
      {"served-model-name",
       [](DaemonConfig& c, const std::string& v) {
         c.served_model_name = v;
         return absl::OkStatus();
       }},
      {"backend",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("backend", v, {"auto", "cpu", "cuda"}, &c.backend);
       }},
      {"attention",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("attention", v, {"tpp", "paged"}, &c.attention);
       }},
      {"cpu-threads",
       [](DaemonConfig& c, const std::string& v) {
         return Int("cpu-threads", v, 0, 4096, &c.cpu_threads);
       }},
      {"host",
       [](DaemonConfig& c, const std::string& v) {
         c.server.host = v;
         return absl::OkStatus();
       }},
      {"http-port",
       [](DaemonConfig& c, const std::string& v) {
         return Int("http-port", v, 0, 65535, &c.server.http_port);
       }},
      {"grpc-port",
       [](DaemonConfig& c, const std::string& v) {
         return Int("grpc-port", v, 0, 65535, &c.server.grpc_port);
       }},
      {"listen-backlog",
       [](DaemonConfig& c, const std::string& v) {
         return Int("listen-backlog", v, 1, 65535, &c.server.listen_backlog);
       }},
      {"deterministic",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("deterministic", v, {"on", "off"}, &c.deterministic);
       }},
      {"kv-memory",
       [](DaemonConfig& c, const std::string& v) {
         c.kv_memory_given = true;
         return Bytes("kv-memory", v, 1, std::numeric_limits<int64_t>::max(), &c.kv_memory_bytes);
       }},
      {"gpu-memory-utilization",
       [](DaemonConfig& c, const std::string& v) {
         double f = 0;
         if (!absl::SimpleAtod(v, &f) || !(f > 0.0 && f <= 1.0)) {
           return absl::InvalidArgumentError(absl::StrCat(
               "gpu-memory-utilization: expected a fraction in (0, 1], got '", v.substr(0, 64),
               "'"));
         }
         c.gpu_memory_utilization = f;
         return absl::OkStatus();
       }},
      {"chunk-size",
       [](DaemonConfig& c, const std::string& v) { return Int("chunk-size", v, 16, 256, &c.chunk_size); }},
      {"max-batch",
       [](DaemonConfig& c, const std::string& v) { return Int("max-batch", v, 1, 1 << 16, &c.max_batch); }},
      {"prefill-budget",
       [](DaemonConfig& c, const std::string& v) {
         return Int("prefill-budget", v, 16, 1 << 20, &c.prefill_budget);
       }},
      {"overlap",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("overlap", v, {"auto", "on", "off"}, &c.overlap);
       }},
      {"feed",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("feed", v, {"auto", "on", "off"}, &c.feed);
       }},
      {"speculative",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("speculative", v, {"off", "hydra", "lookup"}, &c.speculative);
       }},
      {"draft-heads",
       [](DaemonConfig& c, const std::string& v) { c.draft_heads = v; return absl::OkStatus(); }},
      {"draft-tokens",
       [](DaemonConfig& c, const std::string& v) { return Int("draft-tokens", v, 1, 16, &c.draft_tokens); }},
      {"prompt-lookup-min",
       [](DaemonConfig& c, const std::string& v) {
         return Int("prompt-lookup-min", v, 1, 64, &c.prompt_lookup_min);
       }},
      {"prompt-lookup-max",
       [](DaemonConfig& c, const std::string& v) {
         return Int("prompt-lookup-max", v, 0, 64, &c.prompt_lookup_max);
       }},
      {"draft-tree",
       [](DaemonConfig& c, const std::string& v) {
         if (v.empty() || v == "none") {
           c.draft_tree.clear();
           return absl::OkStatus();
         }
         auto b = engine::DraftHeads::ParseBranching(v);
         if (!b.ok()) return absl::InvalidArgumentError("draft-tree: " + std::string(b.status().message()));
         c.draft_tree.assign(b->begin(), b->end());
         return absl::OkStatus();
       }},
      {"speculation-adaptive",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("speculation-adaptive", v, {"on", "off"}, &c.speculation_adaptive);
       }},
      {"speculation-profile",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("speculation-profile", v, {"on", "off"}, &c.speculation_profile);
       }},
      {"draft-on",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("draft-on", v, {"device", "host"}, &c.draft_on);
       }},
      {"speculation-min-accept",
       [](DaemonConfig& c, const std::string& v) {
         return Float("speculation-min-accept", v, 0.0f, 16.0f, &c.speculation_min_accept);
       }},
      {"speculation-max-rows",
       [](DaemonConfig& c, const std::string& v) {
         return Int("speculation-max-rows", v, 1, 1 << 16, &c.speculation_max_rows);
       }},
      {"max-model-len",
       [](DaemonConfig& c, const std::string& v) {
         return Int("max-model-len", v, 0, 1 << 30, &c.max_model_len);
       }},
      {"quantization",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("quantization", v, {"none", "fp8"}, &c.quantization);
       }},
      {"kv-cache-dtype",
       [](DaemonConfig& c, const std::string& v) {
         absl::Status s =
             OneOf("kv-cache-dtype", v, {"auto", "bf16", "fp8", "fp8_e4m3"}, &c.kv_cache_dtype);
         if (s.ok() && c.kv_cache_dtype == "fp8_e4m3") c.kv_cache_dtype = "fp8";
         return s;
       }},
      {"enable-prefix-caching",  // vLLM switches banyand always obeys (server/common/option_aliases.h)
       [](DaemonConfig&, const std::string&) { return absl::OkStatus(); }},
      {"enable-chunked-prefill",
       [](DaemonConfig&, const std::string&) { return absl::OkStatus(); }},
      {"queue-limit",
       [](DaemonConfig& c, const std::string& v) { return Int("queue-limit", v, 1, 1 << 20, &c.queue_limit); }},
      {"api-key",
       [](DaemonConfig& c, const std::string& v) {
         if (!IsWellFormedApiKey(v)) {
           return absl::InvalidArgumentError(absl::StrCat(
               "api-key: a key must be 1..", kMaxApiKeyBytes,
               " bytes of visible ASCII (0x21..0x7e: no space, no control byte)"));
         }
         c.server.api_keys.push_back(v);
         return absl::OkStatus();
       }},
      {"tenants",
       [](DaemonConfig& c, const std::string& v) {
         absl::StatusOr<nlohmann::json> j = ReadConfigJson("tenants", v);
         if (!j.ok()) return j.status();
         absl::StatusOr<std::vector<TenantSpec>> t = ParseTenants(*j, v);
         if (!t.ok()) return t.status();
         c.server.tenants = *std::move(t);
         return absl::OkStatus();
       }},
      {"max-body-bytes",
       [](DaemonConfig& c, const std::string& v) {
         return Bytes("max-body-bytes", v, kMinBodyBytes, kMaxBodyBytes, &c.server.max_body_bytes);
       }},
      {"max-prompt-bytes",
       [](DaemonConfig& c, const std::string& v) {
         int64_t b = 0;
         if (absl::Status s = Bytes("max-prompt-bytes", v, 1, kMaxBodyBytes, &b); !s.ok()) return s;
         c.max_prompt_bytes = b;
         return absl::OkStatus();
       }},
      {"max-n",
       [](DaemonConfig& c, const std::string& v) { return Int("max-n", v, 1, 1024, &c.server.max_n); }},
      {"chat-template",
       [](DaemonConfig& c, const std::string& v) {
         if (std::optional<text::ChatTemplate> builtin = text::ChatTemplateFromName(v)) {
           c.server.chat_template = *builtin;
           c.server.chat_template_file.clear();
           return absl::OkStatus();
         }
         // A Jinja file replacing the model's template (read and parsed by banyand).
         if (absl::Status s = CheckInputPath("chat-template", v, /*allow_dir=*/false); !s.ok()) {
           return absl::Status(s.code(), absl::StrCat(s.message(), " (chat-template takes model, plain, llama2, chatml or a Jinja file)"));
         }
         c.server.chat_template = text::ChatTemplate::kModel;
         c.server.chat_template_file = v;
         return absl::OkStatus();
       }},
      {"drain-timeout-ms",
       [](DaemonConfig& c, const std::string& v) {
         return Int("drain-timeout-ms", v, 0, 3600 * 1000, &c.server.drain_timeout_ms);
       }},
      {"kv-events-config",
       [](DaemonConfig& c, const std::string& v) {
         absl::StatusOr<KvEventsConfig> k = ParseKvEventsConfig(v);
         if (!k.ok()) return k.status();
         c.kv_events = *std::move(k);
         return absl::OkStatus();
       }},
      {"debug-kv-blocks",
       [](DaemonConfig& c, const std::string& v) {
         std::string on;
         if (absl::Status s = OneOf("debug-kv-blocks", v, {"on", "off"}, &on); !s.ok()) return s;
         c.server.debug_kv_blocks = on == "on";
         return absl::OkStatus();
       }},
      {"reasoning-parser",
       [](DaemonConfig& c, const std::string& v) {
         if (v.empty() || v == "none") {
           c.server.reasoning_parser = text::ReasoningParser::kNone;
           return absl::OkStatus();
         }
         std::optional<text::ReasoningParser> p = text::ReasoningParserFromName(v);
         if (!p.has_value()) {
           return absl::InvalidArgumentError(absl::StrCat(
               "reasoning-parser: unknown parser '", v.substr(0, 64), "' (choices: ",
               std::string(text::ReasoningParserNames()), "; none turns it off)"));
         }
         c.server.reasoning_parser = *p;
         return absl::OkStatus();
       }},
      {"log-level",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("log-level", v, {"trace", "debug", "info", "warn", "error"}, &c.log_level);
       }},
  };
  return *setters;
}

absl::Status Apply(DaemonConfig& c, const std::string& name, const std::string& value) {
  absl::StatusOr<std::string> key = CanonicalOptionName(name);
  if (!key.ok()) return key.status();
  auto it = Setters().find(*key);
  if (it == Setters().end()) return absl::InvalidArgumentError("unknown option: " + name);
  return it->second(c, value);
}

// A path a config file names, made relative to the file's folder (an absolute path, an empty
// one and a synthetic "dummy:" model stay as they are).
std::string ResolveConfigPath(const std::string& config_path, const std::string& key,
                              const std::string& value) {
  const bool is_path = key == "model" || key == "tokenizer" || key == "draft_heads" ||
                       key == "draft-heads";
  if (!is_path || value.empty() || value.front() == '/' || value.starts_with("dummy:")) {
    return value;
  }
  const size_t slash = config_path.rfind('/');
  if (slash == std::string::npos) return value;  // the file is in the working directory
  return config_path.substr(0, slash + 1) + value;
}

absl::Status ApplyFile(DaemonConfig& c, const std::string& path) {
  absl::StatusOr<nlohmann::json> j = ReadConfigJson("config", path);
  if (!j.ok()) return j.status();
  if (!j->is_object()) return absl::InvalidArgumentError(path + ": not a JSON object");
  for (auto& [k, v] : j->items()) {
    std::string key = k;
    for (char& ch : key) ch = ch == '_' ? '-' : ch;
    if (key == "api-keys" && v.is_array()) {
      for (auto& item : v) {
        if (!item.is_string()) return absl::InvalidArgumentError(path + ": api_keys must be strings");
        if (absl::Status s = Apply(c, "api-key", item.get<std::string>()); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      }
      continue;
    }
    if (key == "tenants") {
      absl::StatusOr<std::vector<TenantSpec>> t = ParseTenants(v, path);
      if (!t.ok()) return t.status();
      c.server.tenants = *std::move(t);
      continue;
    }
    std::string value;
    if (v.is_string()) {
      value = v.get<std::string>();
      // A chat template file named in a config file is relative to that file's folder.
      if (key == "chat-template" && !text::ChatTemplateFromName(value) && !value.empty() &&
          value[0] != '/') {
        const size_t slash = path.rfind('/');
        if (slash != std::string::npos) value = path.substr(0, slash + 1) + value;
      }
    } else if (v.is_number_integer()) {
      value = std::to_string(v.get<int64_t>());
    } else if (v.is_number_float()) {
      value = absl::StrCat(v.get<double>());
    } else if (key == "kv-events-config" && v.is_object()) {
      value = v.dump();
    } else if (key == "draft-tree" && v.is_array()) {
      for (auto& item : v) {
        if (!item.is_number_integer()) {
          return absl::InvalidArgumentError(path + ": draft_tree must list integers");
        }
        absl::StrAppend(&value, value.empty() ? "" : ",", item.get<int64_t>());
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", k.substr(0, 64), " must be a string or number"));
    }
    if (absl::StatusOr<std::string> canonical = CanonicalOptionName(key); canonical.ok()) {
      value = ResolveConfigPath(path, *canonical, value);
    }
    if (absl::Status s = Apply(c, key, value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// What depends on several options, once all are applied: the plain keys join the tenant
// "default", the prompt limit follows the body limit, the input paths are checked.
absl::Status Finish(DaemonConfig& c) {
  ServerOptions& o = c.server;
  if (!o.api_keys.empty()) {
    TenantSpec* def = nullptr;
    for (TenantSpec& t : o.tenants) {
      if (t.name == kDefaultTenant) def = &t;
    }
    if (def == nullptr) {
      def = &o.tenants.emplace_back();
      def->name = kDefaultTenant;
    }
    def->keys.insert(def->keys.end(), o.api_keys.begin(), o.api_keys.end());
  }
  if (absl::Status s = ValidateTenantSpecs(o.tenants); !s.ok()) return s;
  o.api_keys.clear();
  for (const TenantSpec& t : o.tenants) o.api_keys.insert(o.api_keys.end(), t.keys.begin(), t.keys.end());

  if (c.speculative != "lookup" &&
      (c.prompt_lookup_min != kDefaultPromptLookupMin ||
       c.prompt_lookup_max != kDefaultPromptLookupMax)) {
    return absl::InvalidArgumentError(
        "prompt-lookup-min and prompt-lookup-max are only read with --speculative lookup");
  }
  if (c.prompt_lookup_max > 0 && c.prompt_lookup_min > c.prompt_lookup_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt-lookup-min (", c.prompt_lookup_min, ") is more than prompt-lookup-max (",
        c.prompt_lookup_max, "); prompt-lookup-max 0 turns n-gram lookup off"));
  }
  if (c.max_prompt_bytes.has_value()) {
    if (*c.max_prompt_bytes > o.max_body_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max-prompt-bytes (", *c.max_prompt_bytes, ") is larger than max-body-bytes (",
          o.max_body_bytes, "): no request could carry such a prompt"));
    }
    o.max_prompt_bytes = *c.max_prompt_bytes;
  } else {
    o.max_prompt_bytes = std::min(kDefaultMaxPromptBytes, o.max_body_bytes);
  }

  if (c.gpu_memory_utilization > 0 && c.kv_memory_given) {
    return absl::InvalidArgumentError(
        "--gpu-memory-utilization and --kv-memory both size the KV cache: give one");
  }
  if (c.gpu_memory_utilization > 0 && c.backend == "cpu") {
    return absl::InvalidArgumentError(
        "--gpu-memory-utilization sizes a GPU's KV cache; the CPU backend's is --kv-memory BYTES");
  }
  if (!c.model.empty() && c.model.starts_with("dummy:")) {
    // A synthetic model (model/model_bundle.h): its spelling is checked when it is loaded.
  } else if (!c.model.empty()) {
    if (absl::Status s = CheckInputPath("model", c.model, /*allow_dir=*/true); !s.ok()) return s;
  }
  if (!c.tokenizer.empty()) {
    if (absl::Status s = CheckInputPath("tokenizer", c.tokenizer, /*allow_dir=*/false); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ParseBytes(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  int64_t n;
  if (i == 0 || !absl::SimpleAtoi(std::string(text.substr(0, i)), &n)) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte count: '", std::string(text), "'"));
  }
  static const std::map<std::string, int64_t> kUnits = {
      {"", 1},           {"K", 1000},        {"M", 1000000},       {"G", 1000000000},
      {"T", 1000000000000}, {"KiB", 1 << 10},  {"MiB", 1 << 20},     {"GiB", int64_t{1} << 30},
      {"TiB", int64_t{1} << 40}, {"B", 1}};
  auto unit = kUnits.find(std::string(text.substr(i)));
  if (unit == kUnits.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown unit in '", std::string(text), "'"));
  }
  if (n > std::numeric_limits<int64_t>::max() / unit->second) {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' is too large"));
  }
  return n * unit->second;
}

absl::Status CheckMemoryBudget(std::string_view what, int64_t budget_bytes,
                               int64_t available_bytes, std::string_view where) {
  if (budget_bytes <= available_bytes) return absl::OkStatus();
  auto mib = [](int64_t b) { return b >> 20; };
  return absl::ResourceExhaustedError(absl::StrCat(
      absl::string_view(what.data(), what.size()), " asks for ", mib(budget_bytes),
      " MiB but the ", absl::string_view(where.data(), where.size()), " has ",
      mib(available_bytes), " MiB available; lower it"));
}

absl::StatusOr<int64_t> ParseMemAvailable(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = meminfo.find(kKey);
  if (at == std::string_view::npos) return absl::NotFoundError("no MemAvailable in /proc/meminfo");
  at += kKey.size();
  while (at < meminfo.size() && meminfo[at] == ' ') ++at;
  size_t end = at;
  while (end < meminfo.size() && std::isdigit(static_cast<unsigned char>(meminfo[end]))) ++end;
  int64_t kib = 0;
  if (!absl::SimpleAtoi(std::string(meminfo.substr(at, end - at)), &kib) ||
      kib > std::numeric_limits<int64_t>::max() / 1024) {
    return absl::InvalidArgumentError("unreadable MemAvailable in /proc/meminfo");
  }
  return kib * 1024;  // the kernel's "kB" are KiB
}

absl::StatusOr<int64_t> AvailableHostMemoryBytes() {
  absl::StatusOr<std::string> meminfo = ReadRegularFile("meminfo", "/proc/meminfo");
  if (meminfo.ok()) {
    absl::StatusOr<int64_t> avail = ParseMemAvailable(*meminfo);
    if (avail.ok()) return avail;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return absl::UnavailableError("cannot tell the host's free memory");
  return static_cast<int64_t>(pages) * page;
}

absl::StatusOr<DaemonConfig> LoadDaemonConfig(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return absl::CancelledError("help");
    if (!a.starts_with("--")) return absl::InvalidArgumentError("unexpected argument: " + a);
    a = a.substr(2);
    if (auto eq = a.find('='); eq != std::string::npos) {
      flags.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    } else if (IsVllmSwitch(a)) {  // takes no value: the next argument is an option of its own
      flags.emplace_back(a, "");
    } else if (i + 1 < argc) {
      flags.emplace_back(a, argv[++i]);
    } else {
      return absl::InvalidArgumentError("--" + a + " needs a value");
    }
  }
  DaemonConfig c;
  for (auto& [k, v] : flags) {
    if (k == "config") {
      if (absl::Status s = ApplyFile(c, v); !s.ok()) return s;
    }
  }
  bool keys_from_flags = false;
  for (auto& [k, v] : flags) {
    if (k == "config") continue;
    if (k == "api-key" && !keys_from_flags) {  // flags replace the file's keys
      c.server.api_keys.clear();
      keys_from_flags = true;
    }
    if (absl::Status s = Apply(c, k, v); !s.ok()) return absl::InvalidArgumentError("--" + std::string(s.message()));
  }
  if (absl::Status s = Finish(c); !s.ok()) return s;
  return c;
}

}  // namespace banyan::server
