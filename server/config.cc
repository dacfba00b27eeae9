#include "server/config.h"

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace banyan::server {
namespace {

using Setter = absl::Status (*)(DaemonConfig&, const std::string&);

absl::Status Int(const std::string& key, const std::string& v, int lo, int hi, int* out) {
  int x;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected an integer in [", lo, ", ", hi, "], got '", v, "'"));
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
         return OneOf("backend", v, {"cpu", "cuda"}, &c.backend);
       }},
      {"attention",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("attention", v, {"tpp", "paged"}, &c.attention);
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
      {"kv-memory",
       [](DaemonConfig& c, const std::string& v) {
         auto b = ParseBytes(v);
         if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat("kv-memory: ", b.status().message()));
         c.kv_memory_bytes = *b;
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
      {"queue-limit",
       [](DaemonConfig& c, const std::string& v) { return Int("queue-limit", v, 1, 1 << 20, &c.queue_limit); }},
      {"api-key",
       [](DaemonConfig& c, const std::string& v) {
         if (v.empty()) return absl::InvalidArgumentError("api-key: empty key");
         c.server.api_keys.push_back(v);
         return absl::OkStatus();
       }},
      {"max-body-bytes",
       [](DaemonConfig& c, const std::string& v) {
         auto b = ParseBytes(v);
         if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat("max-body-bytes: ", b.status().message()));
         c.server.max_body_bytes = *b;
         return absl::OkStatus();
       }},
      {"max-n",
       [](DaemonConfig& c, const std::string& v) { return Int("max-n", v, 1, 1024, &c.server.max_n); }},
      {"chat-template",
       [](DaemonConfig& c, const std::string& v) {
         std::string t;
         if (absl::Status s = OneOf("chat-template", v, {"plain", "llama2", "chatml"}, &t); !s.ok()) {
           return s;
         }
         c.server.chat_template = t == "plain"    ? ChatTemplate::kPlain
                                  : t == "llama2" ? ChatTemplate::kLlama2
                                                  : ChatTemplate::kChatML;
         return absl::OkStatus();
       }},
      {"drain-timeout-ms",
       [](DaemonConfig& c, const std::string& v) {
         return Int("drain-timeout-ms", v, 0, 3600 * 1000, &c.server.drain_timeout_ms);
       }},
      {"log-level",
       [](DaemonConfig& c, const std::string& v) {
         return OneOf("log-level", v, {"trace", "debug", "info", "warn", "error"}, &c.log_level);
       }},
  };
  return *setters;
}

absl::Status Apply(DaemonConfig& c, const std::string& key, const std::string& value) {
  auto it = Setters().find(key);
  if (it == Setters().end()) return absl::InvalidArgumentError("unknown option: " + key);
  return it->second(c, value);
}

absl::Status ApplyFile(DaemonConfig& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(path + ": not a JSON object");
  }
  for (auto& [k, v] : j.items()) {
    std::string key = k;
    for (char& ch : key) ch = ch == '_' ? '-' : ch;
    if (key == "api-keys" && v.is_array()) {
      for (auto& item : v) {
        if (!item.is_string()) return absl::InvalidArgumentError(path + ": api_keys must be strings");
        if (absl::Status s = Apply(c, "api-key", item.get<std::string>()); !s.ok()) return s;
      }
      continue;
    }
    std::string value;
    if (v.is_string()) {
      value = v.get<std::string>();
    } else if (v.is_number_integer()) {
      value = std::to_string(v.get<int64_t>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", k, " must be a string or integer"));
    }
    if (absl::Status s = Apply(c, key, value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
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
  return n * unit->second;
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
  return c;
}

}  // namespace banyan::server
