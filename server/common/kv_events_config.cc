#include "server/common/kv_events_config.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "nlohmann/json.hpp"

namespace banyan::server {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("kv-events-config.", field, ": ", why));
}

// tcp://HOST:PORT or ipc://PATH.
absl::Status CheckEndpoint(const std::string& field, const std::string& e) {
  if (e.starts_with("ipc://")) {
    if (e.size() == 6) return Bad(field, "ipc:// needs a path");
    return absl::OkStatus();
  }
  if (!e.starts_with("tcp://")) {
    return Bad(field, absl::StrCat("expected tcp://HOST:PORT or ipc://PATH, got '",
                                   e.substr(0, 200), "'"));
  }
  const std::string rest = e.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Bad(field, absl::StrCat("expected tcp://HOST:PORT, got '", e.substr(0, 200), "'"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return Bad(field, absl::StrCat("port must be 1..65535, got '", rest.substr(colon + 1, 20), "'"));
  }
  return absl::OkStatus();
}

absl::Status Count(const std::string& field, const nlohmann::json& v, int64_t lo, int64_t hi,
                   int64_t* out) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Bad(field, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
  }
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

bool KvEventsConfig::BindsPub() const {
  if (bind.has_value()) return *bind;
  // vLLM's rule: a wildcard or IPv6 address, or a local transport, binds.
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

bool IsLocalEndpoint(std::string_view e) {
  if (e.starts_with("ipc://")) return true;
  if (!e.starts_with("tcp://")) return false;
  std::string_view host = e.substr(6, e.rfind(':') - 6);
  return host.starts_with("127.") || host == "localhost" || host == "[::1]" || host == "::1";
}

absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json) {
  absl::StatusOr<nlohmann::json> parsed = ParseJson(json, "kv-events-config");
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError("kv-events-config: expected a JSON object");
  KvEventsConfig c;
  bool publisher_set = false;
  for (auto& [k, v] : j.items()) {
    if (k == "enable_kv_cache_events") {
      if (!v.is_boolean()) return Bad(k, "expected true or false");
      c.enable_kv_cache_events = v.get<bool>();
    } else if (k == "publisher") {
      if (v.is_null()) continue;
      if (!v.is_string() || (v.get<std::string>() != "zmq" && v.get<std::string>() != "null")) {
        return Bad(k, absl::StrCat("expected \"zmq\" or \"null\", got ", v.dump().substr(0, 100)));
      }
      c.publisher = v.get<std::string>();
      publisher_set = true;
    } else if (k == "endpoint" || k == "replay_endpoint") {
      if (k == "replay_endpoint" && v.is_null()) continue;
      if (!v.is_string()) return Bad(k, "expected a string");
      std::string e = v.get<std::string>();
      if (absl::Status s = CheckEndpoint(k, e); !s.ok()) return s;
      (k == "endpoint" ? c.endpoint : c.replay_endpoint) = std::move(e);
    } else if (k == "buffer_steps") {
      if (absl::Status s = Count(k, v, 1, 10'000'000, &c.buffer_steps); !s.ok()) return s;
    } else if (k == "hwm") {
      if (absl::Status s = Count(k, v, 0, std::numeric_limits<int32_t>::max(), &c.hwm); !s.ok()) {
        return s;
      }
    } else if (k == "max_queue_size") {
      if (absl::Status s = Count(k, v, 1, 10'000'000, &c.max_queue_size); !s.ok()) return s;
    } else if (k == "topic") {
      if (!v.is_string()) return Bad(k, "expected a string");
      c.topic = v.get<std::string>();
    } else if (k == "bind") {
      if (!v.is_boolean()) return Bad(k, "expected true or false");
      c.bind = v.get<bool>();
    } else if (k == "event_encoding") {
      if (!v.is_string() || (v.get<std::string>() != "array" && v.get<std::string>() != "map")) {
        return Bad(k, "expected \"array\" or \"map\"");
      }
      c.map_encoding = v.get<std::string>() == "map";
    } else {
      return Bad(k.substr(0, 64), "unknown field (enable_kv_cache_events, publisher, endpoint, "
                                  "replay_endpoint, buffer_steps, hwm, max_queue_size, topic, "
                                  "bind, event_encoding)");
    }
  }
  if (!publisher_set) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  if (c.active() && c.replay_endpoint == c.endpoint) {
    return Bad("replay_endpoint", "must differ from endpoint");
  }
  return c;
}

}  // namespace banyan::server
